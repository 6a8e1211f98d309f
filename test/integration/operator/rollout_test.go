package operator_test

import (
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/certs"
	"github.com/slicer-operator/slicer/operator/metrics"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

var componentConditions = []string{
	slicerv1alpha1.ConditionKubernetesVersionSupported, slicerv1alpha1.ConditionNodeFeatureRuleReady, slicerv1alpha1.ConditionDriverReady,
	slicerv1alpha1.ConditionWebhookAvailable, slicerv1alpha1.ConditionSchedulerAvailable,
	slicerv1alpha1.ConditionAgentAvailable, slicerv1alpha1.ConditionMonitoringReady,
}

var _ = Describe("Slicer rollout", Ordered, func() {
	AfterEach(cleanSlate)

	It("installs every component in order, as its own ServiceAccount, and reports it (O11, O10 order)", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())

		By("holding the scheduler and agent back until the webhook is available")
		Eventually(func(g Gomega) {
			s := getSlicer(g)
			c := condition(s, slicerv1alpha1.ConditionWebhookAvailable)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonRollingOut))
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.WebhookName}, &appsv1.Deployment{})).To(Succeed())
		}).Should(Succeed())
		err := admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerName}, &appsv1.Deployment{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "scheduler rolled out before the webhook was available: %v", err)
		err = admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "slicer-mig-pods"}, &admissionregistrationv1.MutatingWebhookConfiguration{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "webhook registered before it serves: %v", err)

		By("rolling out to Available once the workloads report available")
		s := waitAvailable(ns)
		for _, t := range componentConditions {
			c := condition(s, t)
			Expect(c).NotTo(BeNil(), t)
			Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s %s", t, c.Reason, c.Message)
			Expect(c.ObservedGeneration).To(Equal(s.Generation), t)
		}
		Expect(condition(s, slicerv1alpha1.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
		Expect(s.Finalizers).To(ContainElement("slicer.dev/cleanup"))
		Eventually(func(g Gomega) { expectInstalled(g, fullInstall(ns)) }).Should(Succeed())

		By("injecting the self-managed CA into the webhook configuration")
		secret := &corev1.Secret{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.WebhookCertSecret}, secret)).To(Succeed())
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: "slicer-mig-pods"}, mwc)).To(Succeed())
		Expect(mwc.Webhooks).NotTo(BeEmpty())
		for _, w := range mwc.Webhooks {
			Expect(w.ClientConfig.CABundle).To(Equal(secret.Data[certs.CAKey]), w.Name)
			Expect(w.ClientConfig.Service.Name).To(Equal(render.WebhookName))
		}

		By("reporting the summary from NodeAccelerators")
		Expect(s.Status.Summary).To(Equal(slicerv1alpha1.SlicerSummary{}))
		na := framework.MakeNodeAccelerator("gpu-node-1").GPUs("H100-80GB", 2).Obj()
		na.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{
			{Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 4}, State: slicerv1alpha1.SliceAllocated, MIGDeviceUUID: "MIG-1"},
			{Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: 4, Size: 1}, State: slicerv1alpha1.SliceFree, MIGDeviceUUID: "MIG-2"},
		}
		na.Status.Conditions = []metav1.Condition{{Type: slicerv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: slicerv1alpha1.ReasonAsExpected, LastTransitionTime: metav1.Now()}}
		Expect(framework.CreateNodeAccelerator(ctx, admin, na)).To(Succeed())
		Expect(framework.CreateNodeAccelerator(ctx, admin, framework.MakeNodeAccelerator("gpu-node-2").GPUs("A30-24GB", 1).Obj())).To(Succeed())
		DeferCleanup(func() {
			Expect(admin.DeleteAllOf(ctx, &slicerv1alpha1.NodeAccelerator{})).To(Succeed())
		})
		Eventually(func(g Gomega) {
			s = getSlicer(g)
			g.Expect(s.Status.Summary).To(Equal(slicerv1alpha1.SlicerSummary{Nodes: 2, ReadyNodes: 1, GPUs: 3, SlicesInUse: 1}))
		}).Should(Succeed())
		out, err := yaml.Marshal(s)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("kubectl get slicer default -o yaml:\n%s\n", out)
		if path := os.Getenv("SLICER_STATUS_OUT"); path != "" {
			Expect(os.WriteFile(path, out, 0o644)).To(Succeed())
		}
		writes, log := op.writes.count()
		GinkgoWriter.Printf("full rollout took %d writes: %v\n", writes, log)
		Expect(testutilGauge(op.metrics, metrics.DependencyNFD)).To(Equal(1.0))
	})

	It("writes nothing on a reconcile with nothing to change (O1, I6)", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		op.stop()

		w := &writeCounter{}
		direct, err := client.NewWithWatch(asOperator, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		r := newReconciler(asOperator, interceptor.NewClient(direct, w.funcs()), ns, nil)
		req := ctrl.Request{NamespacedName: client.ObjectKey{Name: slicerv1alpha1.SlicerName}}
		_, err = r.Reconcile(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		before := map[string]string{}
		Eventually(func(g Gomega) { before = expectInstalled(g, fullInstall(ns)) }).Should(Succeed())
		first, _ := w.count()
		sBefore := getSlicer(Default)

		_, err = r.Reconcile(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		n, log := w.count()
		Expect(n-first).To(Equal(0), "second reconcile wrote: %v", log[first:])
		after := expectInstalled(Default, fullInstall(ns))
		Expect(after).To(Equal(before), "resourceVersions changed")
		Expect(getSlicer(Default).ResourceVersion).To(Equal(sBefore.ResourceVersion))
	})

	It("reverts user edits and deletions of managed objects (O5)", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)

		dep := &appsv1.Deployment{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerName}, dep)).To(Succeed())
		dep.Spec.Template.Spec.Containers[0].Image = "evil.example/scheduler:latest"
		dep.Spec.Replicas = ptr.To[int32](7)
		Expect(admin.Update(ctx, dep)).To(Succeed())

		ds := &appsv1.DaemonSet{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AgentName}, ds)).To(Succeed())
		ds.Spec.Template.Spec.Containers[0].Args = []string{"--tampered"}
		Expect(admin.Update(ctx, ds)).To(Succeed())

		Expect(admin.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: render.SchedulerConfigMap}})).To(Succeed())

		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: "slicer-mig-pods"}, mwc)).To(Succeed())
		wantTimeout := *mwc.Webhooks[0].TimeoutSeconds
		mwc.Webhooks[0].TimeoutSeconds = ptr.To[int32](30)
		mwc.Webhooks[0].ClientConfig.CABundle = []byte("tampered")
		Expect(admin.Update(ctx, mwc)).To(Succeed())

		// The agent is held while the (edited) scheduler rolls out: play the
		// controller-manager so the rollout finishes.
		Eventually(func(g Gomega) {
			_, err := framework.MarkWorkloadsAvailable(ctx, admin, operatorNamespace, ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerName}, dep)).To(Succeed())
			g.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal(schedulerImage(serverVersion.Minor.Minor)))
			g.Expect(*dep.Spec.Replicas).To(Equal(int32(2)))
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AgentName}, ds)).To(Succeed())
			g.Expect(ds.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--node-name=$(NODE_NAME)"))
			g.Expect(ds.Spec.Template.Spec.Containers[0].Args).NotTo(ContainElement("--tampered"))
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerConfigMap}, &corev1.ConfigMap{})).To(Succeed())
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: "slicer-mig-pods"}, mwc)).To(Succeed())
			g.Expect(*mwc.Webhooks[0].TimeoutSeconds).To(Equal(wantTimeout))
			g.Expect(string(mwc.Webhooks[0].ClientConfig.CABundle)).NotTo(Equal("tampered"))
		}).Should(Succeed())
	})

	It("removes cluster-scoped objects on deletion (O9, I12)", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		Expect(admin.Delete(ctx, newSlicer())).To(Succeed())
		Eventually(func(g Gomega) {
			err := admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Slicer still there: %v", err)
		}, time.Minute).Should(Succeed())
		for _, r := range clusterRefs(ns) {
			_, err := getRef(r)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s left behind: %v", r, err)
		}
		agentNS := &corev1.Namespace{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: ns}, agentNS)).To(Succeed())
		Expect(agentNS.DeletionTimestamp).NotTo(BeNil(), "agent namespace not deleted")
	})

	It("does not block deletion forever when an object cannot go (I12 timeout)", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		nfr, err := getRef(ref{nfrGVK, "", render.NodeFeatureRuleKey})
		Expect(err).NotTo(HaveOccurred())
		nfr.SetFinalizers([]string{"test.slicer.dev/hold"})
		Expect(admin.Update(ctx, nfr)).To(Succeed())

		Expect(admin.Delete(ctx, newSlicer())).To(Succeed())
		Eventually(func(g Gomega) {
			err := admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		}, time.Minute).Should(Succeed())
		Eventually(func(g Gomega) {
			var events corev1.EventList
			g.Expect(admin.List(ctx, &events)).To(Succeed())
			reasons, timedOut := []string{}, ""
			for _, e := range events.Items {
				if e.InvolvedObject.Kind == "Slicer" {
					reasons = append(reasons, e.Reason)
					if e.Reason == slicerv1alpha1.ReasonDeletionTimedOut {
						timedOut = e.Message
					}
				}
			}
			g.Expect(reasons).To(ContainElement(slicerv1alpha1.ReasonDeletionTimedOut))
			// What the admin must finish by hand: the step that waited and those never run.
			g.Expect(timedOut).To(And(ContainSubstring(`at step "components"`),
				ContainSubstring("steps not run: [NodeAccelerators DRA ResourceSlices GPU operator labels driver upgrade labels]")))
		}).Should(Succeed())
		nfr, err = getRef(ref{nfrGVK, "", render.NodeFeatureRuleKey})
		Expect(err).NotTo(HaveOccurred())
		nfr.SetFinalizers(nil)
		Expect(admin.Update(ctx, nfr)).To(Succeed())
	})
})
