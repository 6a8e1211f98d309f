package scheduler_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/test/framework"
)

// editor is a client for a tenant: the user, bound to the built-in edit ClusterRole in ns only,
// through impersonation (as a namespace editor reaches the apiserver on a shared cluster).
func editor(ns, user string) client.Client {
	GinkgoHelper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, rb))).To(Succeed())
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	// The apiserver's RBAC authorizer learns of the binding through its informer.
	Eventually(func() error {
		return c.List(ctx, &corev1.PodList{}, client.InNamespace(ns))
	}).Should(Succeed())
	return c
}

// twoTenants is the restart spec's cluster shared by two tenants: tenant b's ReplicaSet "web"
// has its one replica web-1 on n1, which blocks a 7g.80gb there; n2 is full but for 1g.10gb @6
// (a bare pod of the scenario's own namespace). Tenant a (the scenario's namespace, through
// its editor) then asks for a 7g.80gb: the plan (Evict) moves web-1 to n2 @6 and holds that room
// for its replacement. It returns tenant b's namespace, the ReplicaSet's controller reference,
// the editor's client and the pending pod, once web-1 is evicted and gone.
func twoTenants(s *scenario) (string, metav1.OwnerReference, client.Client, *corev1.Pod) {
	GinkgoHelper()
	nsB := s.ns + "-b"
	Expect(k8s.Create(ctx, framework.MakeNamespace(nsB))).To(Succeed())
	s.others = append(s.others, nsB)
	kctx, stopKubelet := context.WithCancel(ctx)
	DeferCleanup(stopKubelet)
	fakeKubelet(kctx, nsB, 0, 0)
	fakeKubelet(kctx, s.ns, 0, 0)
	rsRef := createWebReplicaSet(nsB, 1)
	on := func(ns, name, node string) {
		GinkgoHelper()
		Eventually(func() string {
			var p corev1.Pod
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)).To(Succeed())
			return p.Spec.NodeName
		}, 30*time.Second).Should(Equal(node))
	}
	s.addNode(s.ns+"-n1", 1)
	s.addNode(s.ns+"-n2", 1)
	n1, n2 := s.nodes[0], s.nodes[1]
	s.cordonSeen(n1, true)
	s.create(s.pod("fill", map[string]int64{"4g.40gb": 1, "2g.20gb": 1}))
	on(s.ns, "fill", n2)
	s.cordonSeen(n1, false)
	s.cordonSeen(n2, true)
	Expect(k8s.Create(ctx, replicaIn(s, nsB, "web-1", rsRef))).To(Succeed())
	on(nsB, "web-1", n1)
	s.cordonSeen(n2, false)

	tenantA := editor(s.ns, "alice")
	big := s.pod("big", map[string]int64{"7g.80gb": 1})
	Expect(tenantA.Create(ctx, big)).To(Succeed())
	Eventually(func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "web-1"}, &corev1.Pod{})
	}, 30*time.Second).Should(MatchError(ContainSubstring("not found")), "web-1 evicted and gone")
	return nsB, rsRef, tenantA, big
}

// replicaIn is a 1g.10gb replica of the ReplicaSet rsRef names, in namespace ns, on the
// scenario's pool.
func replicaIn(s *scenario, ns, name string, rsRef metav1.OwnerReference) *corev1.Pod {
	p := s.pod(name, map[string]int64{"1g.10gb": 1})
	p.Namespace = ns
	p.Labels = map[string]string{"app": "web"}
	p.OwnerReferences = []metav1.OwnerReference{rsRef}
	return p
}

var _ = Describe("Defragmentation on a cluster shared by tenants", func() {
	var (
		s *scenario
		r *running
	)
	BeforeEach(func() {
		s = newScenario(fmt.Sprintf("tenant-%d", time.Now().UnixNano()%100000))
		r = startSchedulerWith(ctx, plugin.Options{}, timeout, func(o *config.Options) {
			o.Defragmentation = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationEvict}
		})
	})
	AfterEach(func() {
		r.stop()
		checkInvariants()
		s.cleanup()
		checkInvariants()
	})

	It("holds the room of a moved pod for its own replacement, not for another tenant's pod that names its controller", func() {
		nsB, rsRef, tenantA, big := twoTenants(s)
		By("tenant a's editor creates a pod owned, by its owner reference, by tenant b's ReplicaSet")
		thief := s.pod("thief", map[string]int64{"1g.10gb": 1})
		thief.OwnerReferences = []metav1.OwnerReference{rsRef}
		Expect(tenantA.Create(ctx, thief)).To(Succeed())
		Eventually(func() string { return unschedulable(s.get(thief.Name)) }, 30*time.Second).ShouldNot(BeEmpty())
		Consistently(func() string { return s.get(thief.Name).Spec.NodeName }, 3*time.Second).Should(BeEmpty(),
			"the room held for tenant b's replacement went to tenant a's pod")
		By("tenant b's replacement takes the room held for it; the 7g.80gb pod the room opened")
		Expect(k8s.Create(ctx, replicaIn(s, nsB, "web-2", rsRef))).To(Succeed())
		Eventually(func() string {
			var p corev1.Pod
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "web-2"}, &p)).To(Succeed())
			return p.Spec.NodeName
		}, 30*time.Second).Should(Equal(s.nodes[1]))
		Eventually(func() string { return s.get(big.Name).Spec.NodeName }, 30*time.Second).Should(Equal(s.nodes[0]))
		Expect(s.get(thief.Name).Spec.NodeName).To(BeEmpty())
	})
})
