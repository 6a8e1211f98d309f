package operator_test

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/builder"
)

// playedVersion stands in for the apiserver's /version, so one envtest
// apiserver can play other minors and an upgrade (scenario injection: the
// real source is the discovery client, used by every other test).
type playedVersion struct {
	mu   sync.Mutex
	info version.Info
}

func (p *playedVersion) ServerVersion() (*version.Info, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.info
	return &v, nil
}

// set plays Kubernetes 1.<minor>.<patch>.
func (p *playedVersion) set(minor, patch int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.info = version.Info{Major: "1", Minor: strconv.Itoa(minor), GitVersion: fmt.Sprintf("v1.%d.%d", minor, patch)}
}

func playing(minor, patch int) (*playedVersion, func(*controller.SlicerReconciler)) {
	p := &playedVersion{}
	p.set(minor, patch)
	return p, func(r *controller.SlicerReconciler) {
		r.ServerVersion = p
		// The period after which the version is read again without any
		// other event: what makes the operator notice an upgrade.
		r.VersionRecheck = 200 * time.Millisecond
	}
}

func schedulerDeployment(g Gomega) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerName}, d)).To(Succeed())
	return d
}

// schedulerGrants reports whether the scheduler's ClusterRole grants verb
// on group/resource.
func schedulerGrants(g Gomega, group, res, verb string) bool {
	cr := &rbacv1.ClusterRole{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: render.SchedulerName}, cr)).To(Succeed())
	for _, r := range cr.Rules {
		if contains(r.APIGroups, group) && contains(r.Resources, res) && contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var _ = Describe("Kubernetes minors", Ordered, func() {
	AfterEach(cleanSlate)

	It("deploys the scheduler build of the minor the real apiserver reports", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		s := waitAvailable(ns)
		c := condition(s, slicerv1alpha1.ConditionKubernetesVersionSupported)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		Expect(c.Message).To(ContainSubstring(serverVersion.GitVersion))
		Expect(schedulerDeployment(Default).Spec.Template.Spec.Containers[0].Image).To(Equal(schedulerImage(serverVersion.Minor.Minor)))
	})

	It("rolls the scheduler to the new build and RBAC when the apiserver moves from 1.36 to 1.37", func() {
		ns := nextAgentNamespace()
		played, patch := playing(36, 3)
		op := startOperator(operatorOptions{agentNamespace: ns, slicerPatch: patch})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)

		before := schedulerDeployment(Default)
		Expect(before.Spec.Template.Spec.Containers[0].Image).To(Equal(schedulerImage(36)))
		Expect(schedulerGrants(Default, "resource.k8s.io", "resourceclaims/binding", "update")).To(BeTrue(), "1.36 grants resourceclaims/binding")
		Expect(schedulerGrants(Default, "resource.k8s.io", "devicetaintrules", "list")).To(BeFalse(), "1.36's role does not read devicetaintrules")
		cm := &corev1.ConfigMap{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerConfigMap}, cm)).To(Succeed())
		Expect(cm.Data["config.yaml"]).To(ContainSubstring("placementScore"))
		Expect(cm.Data["config.yaml"]).NotTo(ContainSubstring("podGroupPostFilter"), "1.36's kube-scheduler rejects an unknown extension point")

		By("upgrading the apiserver to 1.37")
		played.set(37, 2)
		Eventually(func(g Gomega) {
			d := schedulerDeployment(g)
			g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(schedulerImage(37)))
			g.Expect(d.Generation).To(BeNumerically(">", before.Generation))
			g.Expect(d.Spec.Strategy.Type).To(Equal(appsv1.RollingUpdateDeploymentStrategyType))
			g.Expect(d.Spec.Template.Annotations[render.ConfigHashAnnotation]).NotTo(Equal(before.Spec.Template.Annotations[render.ConfigHashAnnotation]))
			g.Expect(schedulerGrants(g, "resource.k8s.io", "devicetaintrules", "list")).To(BeTrue(), "1.37 reads devicetaintrules")
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerConfigMap}, cm)).To(Succeed())
			g.Expect(cm.Data["config.yaml"]).To(ContainSubstring("podGroupPostFilter"))
		}).Should(Succeed())
		// The status write follows the apply in the same reconcile: wait for it rather than
		// read the Available the 1.36 build left behind.
		Eventually(func(g Gomega) {
			g.Expect(condition(getSlicer(g), slicerv1alpha1.ConditionKubernetesVersionSupported).Message).To(ContainSubstring("v1.37.2"))
		}).Should(Succeed())
		waitAvailable(ns)
	})

	It("runs no scheduler on an unsupported minor, says so, and rejects MIG pods instead of routing them", func() {
		ns := nextAgentNamespace()
		played, patch := playing(37, 2)
		op := startOperator(operatorOptions{agentNamespace: ns, slicerPatch: patch})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		userNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "minors-user"}}
		Expect(client.IgnoreAlreadyExists(admin.Create(ctx, userNS))).To(Succeed())

		By("upgrading the apiserver to 1.38, which has no scheduler build")
		played.set(38, 0)
		Eventually(func(g Gomega) {
			s := getSlicer(g)
			c := condition(s, slicerv1alpha1.ConditionKubernetesVersionSupported)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonUnsupportedKubernetesVersion))
			g.Expect(c.Message).To(And(ContainSubstring("v1.38.0"), ContainSubstring("1.35 to 1.37")))
			g.Expect(condition(s, slicerv1alpha1.ConditionAvailable).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(condition(s, slicerv1alpha1.ConditionDegraded).Reason).To(Equal(slicerv1alpha1.ReasonUnsupportedKubernetesVersion))
			g.Expect(condition(s, slicerv1alpha1.ConditionSchedulerAvailable).Reason).To(Equal(slicerv1alpha1.ReasonUnsupportedKubernetesVersion))
			for _, obj := range []client.Object{
				&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: render.SchedulerName}},
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: render.SchedulerConfigMap}},
				&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: render.SchedulerName}},
				&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: render.SchedulerName}},
				&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: admName}},
			} {
				err := admin.Get(ctx, client.ObjectKeyFromObject(obj), obj)
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s still there: %v", obj, obj.GetName(), err)
			}
		}).Should(Succeed())

		By("writing nothing once settled (I6), with nothing left to remove")
		w := &writeCounter{}
		direct, err := client.NewWithWatch(asOperator, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		r := newReconciler(asOperator, interceptor.NewClient(direct, w.funcs()), ns, nil)
		r.ServerVersion = played
		req := ctrl.Request{NamespacedName: client.ObjectKey{Name: slicerv1alpha1.SlicerName}}
		_, err = r.Reconcile(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		first, _ := w.count()
		_, err = r.Reconcile(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		n, log := w.count()
		Expect(n-first).To(Equal(0), "second reconcile on an unsupported minor wrote: %v", log[first:])

		By("rejecting MIG pods at admission with the reason, admitting the others")
		for i, res := range []string{"slicer.dev/mig-1g.10gb", "nvidia.com/mig-1g.10gb"} {
			Eventually(func(g Gomega) {
				err := admin.Create(ctx, builder.Pod(userNS.Name, fmt.Sprintf("mig-%d", i)).Container("app", builder.Limits(res, "1")).Obj(), client.DryRunAll)
				g.Expect(err).To(HaveOccurred(), res)
				g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
				g.Expect(err.Error()).To(And(ContainSubstring("ValidatingAdmissionPolicy '"+admName+"'"), ContainSubstring("v1.38.0"), ContainSubstring("1.35 to 1.37")))
			}).Should(Succeed())
		}
		Expect(admin.Create(ctx, builder.Pod(userNS.Name, "cpu").Container("app", builder.Limits("cpu", "1")).Obj(), client.DryRunAll)).To(Succeed())

		By("coming back when the cluster runs a supported minor again")
		played.set(37, 2)
		s := waitAvailable(ns)
		Expect(condition(s, slicerv1alpha1.ConditionKubernetesVersionSupported).Status).To(Equal(metav1.ConditionTrue))
		Expect(schedulerDeployment(Default).Spec.Template.Spec.Containers[0].Image).To(Equal(schedulerImage(37)))
		Expect(admin.Get(ctx, client.ObjectKey{Name: admName}, &admissionregistrationv1.MutatingWebhookConfiguration{})).To(Succeed())
	})
})
