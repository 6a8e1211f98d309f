package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

// Issue 39, "The control plane on GPU nodes" and "Priority": what the operator applies for
// spec.controlPlane and spec.priority, as the operator's ServiceAccount, and what it applies
// when the spec changes back.
var _ = Describe("control plane placement and priority", Ordered, func() {
	AfterEach(cleanSlate)

	It("keeps the control plane off the GPU nodes as the spec asks, and renders the agent namespace's quota when asked", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer(func(s *slicerv1alpha1.Slicer) {
			s.Spec.ControlPlane.AvoidGPUNodes = slicerv1alpha1.AvoidGPUNodesRequired
			s.Spec.ControlPlane.NodeSelector = map[string]string{"node-role.kubernetes.io/infra": ""}
			s.Spec.Priority.CriticalPriorityQuota = slicerv1alpha1.FeatureEnabled
		}))).To(Succeed())
		waitAvailable(ns)

		podSpec := func(g Gomega, name string) corev1.PodSpec {
			d := &appsv1.Deployment{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: name}, d)).To(Succeed())
			return d.Spec.Template.Spec
		}
		for _, name := range []string{render.SchedulerName, render.WebhookName} {
			spec := podSpec(Default, name)
			Expect(spec.PriorityClassName).To(Equal("system-node-critical"), name)
			Expect(spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal([]corev1.NodeSelectorTerm{render.AvoidGPUNodesTerm()}), name)
			Expect(spec.NodeSelector).To(Equal(map[string]string{"node-role.kubernetes.io/infra": ""}), name)
		}
		ds := &appsv1.DaemonSet{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AgentName}, ds)).To(Succeed())
		Expect(ds.Spec.Template.Spec.PriorityClassName).To(Equal("system-node-critical"))
		quota := &corev1.ResourceQuota{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.CriticalPriorityQuotaName}, quota)).To(Succeed())
		Expect(equality.Semantic.DeepEqual(quota.Spec, render.CriticalPriorityQuota(ns).Spec)).To(BeTrue(), "quota %+v", quota.Spec)

		By("preferring other nodes and dropping the quota once the spec says so")
		s := getSlicer(Default)
		s.Spec.ControlPlane = slicerv1alpha1.ControlPlaneSpec{AvoidGPUNodes: slicerv1alpha1.AvoidGPUNodesPreferred}
		s.Spec.Priority.CriticalPriorityQuota = slicerv1alpha1.FeatureDisabled
		Expect(admin.Update(ctx, s)).To(Succeed())
		Eventually(func(g Gomega) {
			// kube-controller-manager's part: the webhook's rollout goes before the scheduler's.
			_, err := framework.MarkWorkloadsAvailable(ctx, admin, operatorNamespace, ns)
			g.Expect(err).NotTo(HaveOccurred())
			for _, name := range []string{render.SchedulerName, render.WebhookName} {
				spec := podSpec(g, name)
				g.Expect(spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution).To(BeNil(), name)
				g.Expect(spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution).To(HaveLen(1), name)
				g.Expect(spec.NodeSelector).To(BeEmpty(), name)
			}
			err = admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.CriticalPriorityQuotaName}, &corev1.ResourceQuota{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the agent namespace's quota is still there: %v", err)
		}).Should(Succeed())
	})
})
