package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// asUser is a client acting as the user of cfg's impersonation.
func asUser(cfg *rest.Config) client.Client {
	GinkgoHelper()
	c, err := client.New(cfg, client.Options{Scheme: admin.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// agentOn impersonates the agent of node: its ServiceAccount with the node-name extra the
// kube-apiserver sets from a pod-bound token (render.NodeNameExtra). node "" plays a token
// bound to no pod.
func agentOn(agentNamespace, node string) client.Client {
	cfg := framework.ImpersonatedConfig(env.Config, agentNamespace, render.AgentName)
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{render.NodeNameExtra: {node}}
	}
	return asUser(cfg)
}

// placed is the allocation the scheduler commits for a pod on node (scheduler/plugin/names.go).
func placed(namespace, name, node string) *slicerv1alpha1.SliceAllocation {
	a := framework.MakeSliceAllocation(namespace, name).Node(node).Obj()
	a.Labels = map[string]string{slicerv1alpha1.LabelNode: node, slicerv1alpha1.LabelPodUID: a.Spec.PodUID}
	a.Finalizers = []string{slicerv1alpha1.AllocationFinalizer}
	a.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: a.Spec.PodName, UID: types.UID(a.Spec.PodUID)}}
	return a
}

func createNamespace(name string) {
	GinkgoHelper()
	Expect(client.IgnoreAlreadyExists(admin.Create(ctx, framework.MakeNamespace(name)))).To(Succeed())
}

// refusedBy expects a Forbidden error carrying want (the policy's message).
func refusedBy(err error, want string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "admitted; want refused with %q", want)
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden: %v", err)
	Expect(err.Error()).To(ContainSubstring(want))
}

// eventuallyRefused creates obj until an admission policy refuses it with want: the apiserver
// enforces a policy the operator has just written a moment later, and each policy on its own
// (waitAvailable does not wait for that). A copy admitted meanwhile is deleted at once.
func eventuallyRefused(obj client.Object, want string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		o := obj.DeepCopyObject().(client.Object)
		err := admin.Create(ctx, o)
		if err == nil {
			g.Expect(admin.Delete(ctx, o, client.GracePeriodSeconds(0))).To(Succeed())
		}
		g.Expect(err).To(HaveOccurred(), "admitted; want refused with %q", want)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden: %v", err)
		g.Expect(err.Error()).To(ContainSubstring(want))
	}).Should(Succeed())
}

// patch applies change to a fresh copy of obj with a merge patch, as the agent writes.
func patch[T client.Object](c client.Client, obj T, status bool, change func(T)) error {
	GinkgoHelper()
	return patchAs(c, obj, status, false, change)
}

// patchAs is patch, as a dry run when dryRun is set: admission runs, nothing is stored.
func patchAs[T client.Object](c client.Client, obj T, status, dryRun bool, change func(T)) error {
	GinkgoHelper()
	cur := obj.DeepCopyObject().(T)
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(obj), cur)).To(Succeed())
	p := client.MergeFrom(cur.DeepCopyObject().(T))
	change(cur)
	switch {
	case status && dryRun:
		return c.Status().Patch(ctx, cur, p, client.DryRunAll)
	case status:
		return c.Status().Patch(ctx, cur, p)
	case dryRun:
		return c.Patch(ctx, cur, p, client.DryRunAll)
	}
	return c.Patch(ctx, cur, p)
}

func readyStatus(a *slicerv1alpha1.SliceAllocation) {
	a.Status = slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationReady, MIGDeviceUUID: "MIG-00000000-0000-0000-0000-000000000001"}
}

func dropFinalizer(a *slicerv1alpha1.SliceAllocation) {
	controllerutil.RemoveFinalizer(a, slicerv1alpha1.AllocationFinalizer)
}

var _ = Describe("Guards of a shared cluster", Ordered, func() {
	AfterEach(cleanSlate)

	It("confines the device-plugin agent to its node's allocations and NodeAccelerator", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		apps := "guard-agents"
		createNamespace(apps)
		scheduler := asUser(framework.ImpersonatedConfig(env.Config, operatorNamespace, render.SchedulerName))
		agentA := agentOn(ns, "node-a")
		foreign := render.AgentForeignNodeMessage + ": the agent on node 'node-a' may not write "

		onA, onB := placed(apps, "on-a", "node-a"), placed(apps, "on-b", "node-b")
		Expect(scheduler.Create(ctx, onA)).To(Succeed())
		Expect(scheduler.Create(ctx, onB)).To(Succeed())
		Expect(admin.Create(ctx, framework.MakeNodeAccelerator("node-b").Obj())).To(Succeed())
		DeferCleanup(func() {
			for _, n := range []string{"node-a", "node-b"} {
				Expect(client.IgnoreNotFound(admin.Delete(ctx, framework.MakeNodeAccelerator(n).Obj()))).To(Succeed())
			}
		})

		By("node B's objects: every write refused with the policy's message")
		// The apiserver compiles a new policy a moment after it is created.
		// The probe is a dry run: a write admitted before the policy is enforced changes nothing.
		Eventually(func(g Gomega) {
			err := patchAs(agentA, onB, true, true, readyStatus)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring(foreign + "sliceallocations of node 'node-b'"))
		}).Should(Succeed())
		refusedBy(patch(agentA, onB, false, dropFinalizer), foreign+"sliceallocations of node 'node-b'")
		refusedBy(agentA.Delete(ctx, onB.DeepCopy()), foreign+"sliceallocations of node 'node-b'")
		refusedBy(agentA.Create(ctx, framework.MakeNodeAccelerator("node-b").Obj()), foreign+"nodeaccelerators of node 'node-b'")
		refusedBy(patch(agentA, framework.MakeNodeAccelerator("node-b").Obj(), true, func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.DriverVersion = "forged"
		}), foreign+"nodeaccelerators of node 'node-b'")
		refusedBy(agentOn(ns, "").Create(ctx, framework.MakeNodeAccelerator("node-a").Obj()), render.AgentNoNodeMessage)
		Expect(apierrors.IsForbidden(agentA.Create(ctx, placed(apps, "forged", "node-a")))).To(BeTrue(), "the agent creates no allocation")
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(onB), onB)).To(Succeed())
		Expect(onB.Status.State).To(BeEmpty())
		Expect(onB.Finalizers).To(ConsistOf(slicerv1alpha1.AllocationFinalizer))
		Expect(onB.DeletionTimestamp).To(BeNil())

		By("node A's objects: every write the agent makes passes")
		Expect(agentA.Create(ctx, framework.MakeNodeAccelerator("node-a").Obj())).To(Succeed())
		Expect(patch(agentA, framework.MakeNodeAccelerator("node-a").Obj(), true, func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.DriverVersion = "580.65.06"
		})).To(Succeed())
		Expect(patch(agentA, onA, true, readyStatus)).To(Succeed())
		Expect(agentA.Delete(ctx, onA.DeepCopy())).To(Succeed(), "the agent deletes an allocation whose pod is gone")
		Expect(patch(agentA, onA, false, dropFinalizer)).To(Succeed(), "the agent releases its slice")
		Expect(apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(onA), onA.DeepCopy()))).To(BeTrue())

		By("the scheduler writes no allocation it did not create")
		Expect(apierrors.IsForbidden(patch(scheduler, onB, false, func(a *slicerv1alpha1.SliceAllocation) { a.Annotations = map[string]string{"x": "y"} }))).To(BeTrue())
		Expect(scheduler.Delete(ctx, onB.DeepCopy())).To(Succeed(), "unreserve deletes the allocation of an unbound pod")
		Expect(patch(agentOn(ns, "node-b"), onB, false, dropFinalizer)).To(Succeed(), "node B's agent releases it")
	})

	It("confines the DRA kubelet plugin to its node's ResourceSlices", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer(draSlicer))).To(Succeed())
		waitAvailable(ns)
		agentA := agentOn(ns, "node-a")
		foreign := render.AgentForeignNodeMessage + ": the agent on node 'node-a' may not write resourceslices of node 'node-b'"
		theirs := driverSlice("guard-b", migdra.DriverName, "node-b")
		Expect(admin.Create(ctx, theirs)).To(Succeed())
		DeferCleanup(func() {
			for _, n := range []string{"guard-a", "guard-b", "guard-b2"} {
				Expect(client.IgnoreNotFound(admin.Delete(ctx, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n}}))).To(Succeed())
			}
		})

		// The probe is a dry run: a deletion admitted before the policy is enforced deletes nothing.
		Eventually(func(g Gomega) {
			err := agentA.Delete(ctx, theirs.DeepCopy(), client.DryRunAll)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring(foreign))
		}).Should(Succeed())
		refusedBy(agentA.Create(ctx, driverSlice("guard-b2", migdra.DriverName, "node-b")), foreign)
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(theirs), theirs)).To(Succeed())
		theirs.Spec.Pool.Generation++
		refusedBy(agentA.Update(ctx, theirs), foreign)
		err := agentA.DeleteAllOf(ctx, &resourceapi.ResourceSlice{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the agent has no deletecollection: %v", err)

		ours := driverSlice("guard-a", migdra.DriverName, "node-a")
		Expect(agentA.Create(ctx, ours)).To(Succeed())
		ours.Spec.Pool.Generation++
		Expect(agentA.Update(ctx, ours)).To(Succeed())
		Expect(agentA.Delete(ctx, ours)).To(Succeed())
	})

	It("refuses every SliceAllocation write of namespace admins and editors holding OLM's aggregated roles; collectors still delete", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		tenantNS := "guard-tenant"
		createNamespace(tenantNS)
		aggregateOLMRoles()
		for user, role := range map[string]string{"tenant-admin": "admin", "tenant-editor": "edit"} {
			rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: user},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
			Expect(client.IgnoreAlreadyExists(admin.Create(ctx, rb))).To(Succeed())
		}
		scheduler := asUser(framework.ImpersonatedConfig(env.Config, operatorNamespace, render.SchedulerName))
		live := placed(tenantNS, "live", "node-a")
		Expect(scheduler.Create(ctx, live)).To(Succeed())
		createMsg := "created only by Slicer's scheduler"

		for _, user := range []string{"tenant-admin", "tenant-editor"} {
			By(user)
			// RBAC lets them write (the aggregated role), so what refuses is the policy.
			verbs := []string{"create", "update", "patch", "delete"}
			if user == "tenant-admin" {
				verbs = append(verbs, "deletecollection") // OLM's admin role has "*"
			}
			for _, verb := range verbs {
				Eventually(func(g Gomega) {
					sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
						ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: tenantNS, Verb: verb, Group: slicerv1alpha1.GroupVersion.Group, Resource: "sliceallocations"}}}
					g.Expect(admin.Create(ctx, sar)).To(Succeed())
					g.Expect(sar.Status.Allowed).To(BeTrue(), "%s may not %s sliceallocations by RBAC: %s", user, verb, sar.Status.Reason)
				}).Should(Succeed())
			}
			cfg := rest.CopyConfig(env.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
			tenant := asUser(cfg)
			Eventually(func(g Gomega) {
				err := patch(tenant, live, false, dropFinalizer)
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).To(ContainSubstring(render.AllocationUpdateMessage))
			}).Should(Succeed())
			refusedBy(tenant.Create(ctx, placed(tenantNS, "mine", "node-a")), createMsg)
			refusedBy(patch(tenant, live, false, func(a *slicerv1alpha1.SliceAllocation) { delete(a.Labels, slicerv1alpha1.LabelNode) }), render.AllocationUpdateMessage)
			refusedBy(patch(tenant, live, false, func(a *slicerv1alpha1.SliceAllocation) { a.Annotations = map[string]string{"x": "y"} }), render.AllocationUpdateMessage)
			cur := &slicerv1alpha1.SliceAllocation{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(live), cur)).To(Succeed())
			cur.Finalizers = nil
			refusedBy(tenant.Update(ctx, cur), render.AllocationUpdateMessage)
			Expect(apierrors.IsForbidden(patch(tenant, live, true, readyStatus))).To(BeTrue(), "status")
			refusedBy(tenant.Delete(ctx, live.DeepCopy()), render.AllocationDeleteMessage)
			err := tenant.DeleteAllOf(ctx, &slicerv1alpha1.SliceAllocation{}, client.InNamespace(tenantNS))
			if user == "tenant-admin" {
				refusedBy(err, render.AllocationDeleteMessage)
			} else {
				Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deletecollection: %v", err)
			}
		}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(live), live)).To(Succeed())
		Expect(live.DeletionTimestamp).To(BeNil())
		Expect(live.Finalizers).To(ConsistOf(slicerv1alpha1.AllocationFinalizer))
		Expect(live.Labels).To(HaveKeyWithValue(slicerv1alpha1.LabelNode, "node-a"))

		By("the garbage collector and the namespace controller")
		gc := asUser(framework.ImpersonatedConfig(env.Config, "kube-system", "generic-garbage-collector"))
		Expect(patch(gc, live, false, func(a *slicerv1alpha1.SliceAllocation) { a.OwnerReferences = nil })).To(Succeed(), "the collector orphans")
		refusedBy(patch(gc, live, false, dropFinalizer), render.AllocationUpdateMessage)
		Expect(gc.Delete(ctx, live.DeepCopy())).To(Succeed())
		second := placed(tenantNS, "second", "node-a")
		Expect(scheduler.Create(ctx, second)).To(Succeed())
		nsController := asUser(framework.ImpersonatedConfig(env.Config, "kube-system", "namespace-controller"))
		Expect(nsController.DeleteAllOf(ctx, &slicerv1alpha1.SliceAllocation{}, client.InNamespace(tenantNS))).To(Succeed())
		agentA := agentOn(ns, "node-a")
		for _, a := range []*slicerv1alpha1.SliceAllocation{live, second} {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(a), a)).To(Succeed())
			Expect(a.DeletionTimestamp).NotTo(BeNil(), "%s is being deleted", a.Name)
			Expect(patch(agentA, a, false, dropFinalizer)).To(Succeed(), "the agent releases %s", a.Name)
		}
	})
})

// aggregateOLMRoles creates the ClusterRoles OLM writes for the SliceAllocation CRD
// (docs/olm-testing.md: <crd>-v1alpha1-{admin,edit,view}, labelled to aggregate into the
// admin, edit and view roles) and does what kube-controller-manager's ClusterRole
// aggregation controller would (envtest runs none): it adds their rules to admin and edit.
// The aggregated roles are restored when the spec ends.
func aggregateOLMRoles() {
	GinkgoHelper()
	crd := "sliceallocations." + slicerv1alpha1.GroupVersion.Group + "-v1alpha1-"
	rule := func(verbs ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{APIGroups: []string{slicerv1alpha1.GroupVersion.Group}, Resources: []string{"sliceallocations"}, Verbs: verbs}}
	}
	olm := map[string][]rbacv1.PolicyRule{
		"admin": rule("*"),
		"edit":  rule("create", "update", "patch", "delete"),
		"view":  rule("get", "list", "watch"),
	}
	for role, rules := range olm {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: crd + role,
			Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-" + role: "true"}}, Rules: rules}
		Expect(client.IgnoreAlreadyExists(admin.Create(ctx, cr))).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, cr))).To(Succeed()) })
	}
	for _, target := range []string{"admin", "edit"} {
		var cr rbacv1.ClusterRole
		Expect(admin.Get(ctx, client.ObjectKey{Name: target}, &cr)).To(Succeed())
		Expect(cr.AggregationRule).NotTo(BeNil())
		before := append([]rbacv1.PolicyRule(nil), cr.Rules...)
		var list rbacv1.ClusterRoleList
		for _, sel := range cr.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			Expect(err).NotTo(HaveOccurred())
			Expect(admin.List(ctx, &list, client.MatchingLabelsSelector{Selector: s})).To(Succeed())
			for _, r := range list.Items {
				cr.Rules = append(cr.Rules, r.Rules...)
			}
		}
		Expect(admin.Update(ctx, &cr)).To(Succeed())
		DeferCleanup(func() {
			var cur rbacv1.ClusterRole
			Expect(admin.Get(ctx, client.ObjectKey{Name: target}, &cur)).To(Succeed())
			cur.Rules = before
			Expect(admin.Update(ctx, &cur)).To(Succeed())
		})
	}
}

var _ = Describe("Device access guard", Ordered, func() {
	AfterEach(cleanSlate)

	It("refuses pods that select NVIDIA devices themselves, in every namespace, and MIG pods pinned to a node in kube-system", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		apps := "guard-pods"
		createNamespace(apps)
		// envtest runs no ServiceAccount controller: the pods' ServiceAccount by hand.
		for _, n := range []string{apps, "kube-system", operatorNamespace} {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "default"}}
			Expect(client.IgnoreAlreadyExists(admin.Create(ctx, sa))).To(Succeed())
		}
		pod := func(namespace, name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
			p := builder.Pod(namespace, name).Container("app", builder.None).Obj()
			p.Spec.AutomountServiceAccountToken = ptr.To(false)
			for _, m := range mutate {
				m(p)
			}
			return p
		}
		visible := func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		}
		cdi := func(p *corev1.Pod) { p.Annotations = map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=all"} }
		eventuallyRefused(pod(apps, "visible", visible), render.DeviceEnvMessage+": container app sets NVIDIA_VISIBLE_DEVICES")
		refusedBy(admin.Create(ctx, pod("kube-system", "visible", visible)), render.DeviceEnvMessage)
		refusedBy(admin.Create(ctx, pod(operatorNamespace, "visible", visible)), render.DeviceEnvMessage)
		refusedBy(admin.Create(ctx, pod(apps, "cdi", cdi)), render.DeviceAnnotationMessage+": annotation cdi.k8s.io/gpu")
		plain := pod(apps, "plain")
		Expect(admin.Create(ctx, plain)).To(Succeed())
		refusedBy(patch(admin, plain, false, cdi), render.DeviceAnnotationMessage)
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, plain))).To(Succeed()) })

		By("the MIG pod policy holds in kube-system too")
		pinned := pod("kube-system", "pinned", func(p *corev1.Pod) {
			p.Spec.SchedulerName = "slicer-scheduler"
			p.Spec.NodeName = "node-a"
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"slicer.dev/mig-1g.10gb": resource.MustParse("1")}
		})
		eventuallyRefused(pinned, "pins spec.nodeName")
	})
})
