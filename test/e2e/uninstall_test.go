package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/builder"
)

// expectDeviceSelectionRefused: a pod that sets NVIDIA_VISIBLE_DEVICES itself, in any
// namespace, is refused with why (issue 28 item 3); the kubelet never sees it.
func expectDeviceSelectionRefused(ctx SpecContext) {
	for _, ns := range []string{"default", "kube-system"} {
		p := plainPod(ns, "selects-gpus")
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		err := k8s.Create(ctx, p, client.DryRunAll)
		Expect(err).To(HaveOccurred(), "a pod selecting NVIDIA devices itself was admitted in %s", ns)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(render.DeviceEnvMessage+": container main sets NVIDIA_VISIBLE_DEVICES"), "in %s", ns)
	}
}

// expectDirectSlicesRefusedInKubeNamespaces: the webhook leaves kube-* alone, but the pod
// policy does not: a pod there that asks for slicer.dev/mig-* directly, without Slicer's
// scheduler or pinned to the node, is refused with why (issue 28 item 3).
func expectDirectSlicesRefusedInKubeNamespaces(ctx SpecContext) {
	direct := func(name string) *builder.PodBuilder {
		return builder.Pod("kube-system", name).RestartNever().
			Container("main", builder.Limits(mig.ResourcePrefix+"1g.10gb", "1")).Shell(printDevice + waitForTerm)
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{direct("direct").Obj(), "spec.schedulerName is not"},
		{direct("pinned").Scheduler("slicer-scheduler").Node(node).Obj(), "pins spec.nodeName"},
	} {
		err := k8s.Create(ctx, tc.pod, client.DryRunAll)
		Expect(err).To(HaveOccurred(), "pod %s asking for slicer.dev/* directly was admitted in kube-system", tc.pod.Name)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(tc.want))
	}
}

// uninstallSpec deletes the Slicer with MIG pods running (issue 28 item 5, I12): under the
// default policy it waits, naming the pods, with everything running; forced, it deletes
// the pods, the agent destroys their instances and releases their allocations, and then
// everything Slicer created goes; no allocation, finalizer, instance, CDI spec or
// namespace is left behind. It runs last but the Helm spec: it uninstalls Slicer.
func uninstallSpec(ctx SpecContext) {
	const ns = "e2e-uninstall"
	createNamespace(ctx, ns)
	pods := []string{"train-a", "train-b"}
	for _, name := range pods {
		createPod(ctx, slicePod(ns, name, "1g.10gb"))
	}
	waitRunning(ctx, ns, pods...)
	Expect(allocationsIn(ctx, ns)).To(HaveLen(len(pods)))

	By("deleting the Slicer (policy Wait, the default): it stays, naming the pods, and Slicer keeps running")
	slicer := &slicerv1alpha1.Slicer{ObjectMeta: objectMeta("", slicerv1alpha1.SlicerName)}
	Expect(k8s.Delete(ctx, slicer)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(slicer), slicer)).To(Succeed())
		c := meta.FindStatusCondition(slicer.Status.Conditions, slicerv1alpha1.ConditionSlicesReleased)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonWaitingForPods))
		g.Expect(c.Message).To(ContainSubstring("2 pods hold MIG slices: " + ns + "/train-a, " + ns + "/train-b"))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	Consistently(func(g Gomega) {
		for _, name := range pods {
			g.Expect(podPhase(ctx, ns, name)).To(Equal(corev1.PodRunning))
		}
		g.Expect(allocationsIn(ctx, ns)).To(HaveLen(len(pods)))
		var ds appsv1.DaemonSetList
		g.Expect(k8s.List(ctx, &ds, client.MatchingLabels{render.ManagedByLabel: render.ManagedByValue})).To(Succeed())
		g.Expect(ds.Items).NotTo(BeEmpty(), "the agent was removed while pods hold slices")
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerName}, &appsv1.Deployment{})).To(Succeed())
	}).WithContext(ctx).WithTimeout(20 * time.Second).WithPolling(2 * time.Second).Should(Succeed())

	By("forcing: the pods go, the agent releases their slices, then everything Slicer created goes")
	patch := client.MergeFrom(slicer.DeepCopy())
	slicer.Spec.Uninstall.Policy = slicerv1alpha1.UninstallForce
	Expect(k8s.Patch(ctx, slicer, patch)).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{}))
	}).WithContext(ctx).WithTimeout(4*time.Minute).Should(BeTrue(), "the Slicer resource was not removed")

	expectNoSliceLeft(ctx)

	managed := client.MatchingLabels{render.ManagedByLabel: render.ManagedByValue}
	lists := map[string]client.ObjectList{
		"MutatingWebhookConfigurations":     &admissionregistrationv1.MutatingWebhookConfigurationList{},
		"ValidatingAdmissionPolicies":       &admissionregistrationv1.ValidatingAdmissionPolicyList{},
		"ValidatingAdmissionPolicyBindings": &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{},
		"ClusterRoles":                      &rbacv1.ClusterRoleList{},
		"ClusterRoleBindings":               &rbacv1.ClusterRoleBindingList{},
		"Deployments (scheduler, webhook)":  &appsv1.DeploymentList{},
		"DaemonSets (agent)":                &appsv1.DaemonSetList{},
		"Namespaces":                        &corev1.NamespaceList{},
	}
	Eventually(func(g Gomega) {
		for what, l := range lists {
			g.Expect(k8s.List(ctx, l, managed)).To(Succeed())
			g.Expect(meta.LenList(l)).To(BeZero(), "%s left behind", what)
		}
		var left corev1.PodList
		g.Expect(k8s.List(ctx, &left, client.MatchingLabels{"app.kubernetes.io/part-of": "slicer"})).To(Succeed())
		g.Expect(left.Items).To(BeEmpty(), "component pods left behind")
		g.Expect(k8s.List(ctx, &left, client.InNamespace(ns))).To(Succeed())
		g.Expect(left.Items).To(BeEmpty(), "the pods that held slices are deleted")
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())

	By("the tenant's namespace goes too: no allocation finalizer holds it")
	deleteNamespace(ctx, ns)
	Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}))
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeTrue(), "namespace %s hangs", ns)
}
