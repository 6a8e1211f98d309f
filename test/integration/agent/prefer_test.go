package agent_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// kubeletPods is a settable agent.KubeletPods.
type kubeletPods struct {
	mu   sync.Mutex
	pods map[string]map[string][]string
}

func (k *kubeletPods) set(p map[string]map[string][]string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = p
}

func (k *kubeletPods) PodDevices(context.Context) (map[string]map[string][]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.pods), nil
}

var _ = Describe("Which pod gets which slice", func() {
	It("prefers the device allocated to the oldest pod the kubelet is admitting", func() {
		n := newNode("n-prefer", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		res := mig.ResourceName("1g.10gb")
		// Pods bound to the node; "z-old" is created a second before "a-young"
		// (creation timestamps have second resolution), so age, not name, decides.
		old := bindPod(n.name, "z-old")
		Eventually(func() bool { return time.Since(old.CreationTimestamp.Time) > time.Second }).Should(BeTrue())
		young := bindPod(n.name, "a-young")
		elsewhere := bindPod("n-other", "b-elsewhere")
		aOld := allocateFor(n, old, 0)
		aYoung := allocateFor(n, young, 1)
		aElse := allocateFor(n, elsewhere, 2)
		// The kubelet knows each slice by its slot's device ID.
		dOld, dYoung := framework.DeviceIDOf(n.waitReady(aOld)), framework.DeviceIDOf(n.waitReady(aYoung))
		dElse := framework.DeviceIDOf(n.waitReady(aElse))

		opts := agent.CacheOptions(n.name)
		opts.Scheme = env.Scheme
		c, err := cache.New(env.Config, opts)
		Expect(err).NotTo(HaveOccurred())
		cctx, cancel := context.WithCancel(ctx)
		DeferCleanup(cancel)
		go func() { _ = c.Start(cctx) }()
		Expect(c.WaitForCacheSync(cctx)).To(BeTrue())
		kp := &kubeletPods{}
		live := &countingReader{Reader: k8s}
		ch := &agent.Chooser{Cache: c, Live: live, Node: n.name, Kubelet: kp, Log: GinkgoLogr}
		available := []string{dYoung, dElse, dOld}

		// The kubelet admits z-old (both pods listed, neither holds a device).
		kp.set(map[string]map[string][]string{"team-a/z-old": {}, "team-a/a-young": {}, "team-a/b-elsewhere": {}})
		Eventually(func() []string { return ch.Preferred(ctx, res, available, nil, 1) }).Should(Equal([]string{dOld}))
		// z-old holds its device now; the kubelet admits a-young.
		kp.set(map[string]map[string][]string{"team-a/z-old": {res: {dOld}}, "team-a/a-young": {}, "team-a/b-elsewhere": {}})
		Expect(ch.Preferred(ctx, res, []string{dYoung, dElse}, nil, 1)).To(Equal([]string{dYoung}))
		// The cache had every pod bound to the node and every allocation: the API server
		// was read only for the pod bound elsewhere (not in the node's cache), by name.
		live.reset()
		Expect(ch.Preferred(ctx, res, []string{dYoung, dElse}, nil, 1)).To(Equal([]string{dYoung}))
		Expect(live.calls()).To(ConsistOf("get pod team-a/b-elsewhere"))
		// Only the pod bound elsewhere is left: no candidate, the kubelet chooses.
		kp.set(map[string]map[string][]string{"team-a/z-old": {res: {dOld}}, "team-a/a-young": {res: {dYoung}}, "team-a/b-elsewhere": {}})
		Expect(ch.Preferred(ctx, res, []string{dElse}, nil, 1)).To(BeEmpty())
		// Another profile's resource has no candidate either.
		Expect(ch.Preferred(ctx, mig.ResourceName("2g.20gb"), available, nil, 1)).To(BeEmpty())
	})
})

var _ = Describe("Which pod gets which slice, before the agent's cache has the pod", func() {
	It("reads the pod and its allocations with GETs, never a LIST", func() {
		n := newNode("n-prefer-miss", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		res := mig.ResourceName("1g.10gb")
		p := bindPod(n.name, "fresh")
		a := allocateFor(n, p, 0)
		dev := framework.DeviceIDOf(n.waitReady(a))
		// An empty cache: the pod was bound, and its allocation committed, a moment ago.
		empty := fake.NewClientBuilder().WithScheme(env.Scheme).Build()
		live := &countingReader{Reader: k8s}
		kp := &kubeletPods{}
		kp.set(map[string]map[string][]string{"team-a/fresh": {}})
		ch := &agent.Chooser{Cache: empty, Live: live, Node: n.name, Kubelet: kp, Log: GinkgoLogr}
		Expect(ch.Preferred(ctx, res, []string{"MIG-other", dev}, nil, 1)).To(Equal([]string{dev}))
		Expect(live.calls()).To(ConsistOf("get pod team-a/fresh", "get allocation team-a/"+a.Name))

		// A cache that has the pod, and the allocation before it turned Ready (no status yet):
		// the allocation is read again, the pod is not.
		stale := n.get(a)
		stale.Status = slicerv1alpha1.SliceAllocationStatus{}
		var cachedPod corev1.Pod
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), &cachedPod)).To(Succeed())
		ch.Cache = fake.NewClientBuilder().WithScheme(env.Scheme).WithObjects(stale, &cachedPod).Build()
		live.reset()
		Expect(ch.Preferred(ctx, res, []string{"MIG-other", dev}, nil, 1)).To(Equal([]string{dev}))
		Expect(live.calls()).To(ConsistOf("get allocation team-a/" + a.Name))
	})
})

// countingReader records the reads that reach the API server.
type countingReader struct {
	client.Reader
	mu  sync.Mutex
	log []string
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	kind := "pod"
	if _, ok := obj.(*slicerv1alpha1.SliceAllocation); ok {
		kind = "allocation"
	}
	r.record("get " + kind + " " + key.String())
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.record(fmt.Sprintf("list %T", list))
	return r.Reader.List(ctx, list, opts...)
}

func (r *countingReader) record(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *countingReader) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = nil
}

func (r *countingReader) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// bindPod creates a pod asking for one 1g.10gb slice, already bound to node (as after the
// scheduler's bind).
func bindPod(node, name string) *corev1.Pod {
	p := builder.Pod("team-a", name).Node(node).Container("c", builder.Limits(mig.ResourceName("1g.10gb"), "1")).Obj()
	Expect(k8s.Create(ctx, p)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed()) })
	return p
}

// allocateFor creates a Ready-to-be 1g.10gb allocation on n for pod at start, named as the
// scheduler names it.
func allocateFor(n *node, p *corev1.Pod, start int32) *slicerv1alpha1.SliceAllocation {
	a := framework.MakeSliceAllocation("team-a", slicerv1alpha1.AllocationName(p.Name, string(p.UID), 0)).Node(n.name).GPU(n.gpu(0)).Profile("1g.10gb", start, 1).
		Pod(p.Name, string(p.UID)).Obj()
	a.Labels = map[string]string{slicerv1alpha1.LabelNode: n.name, slicerv1alpha1.LabelPodUID: a.Spec.PodUID}
	Expect(k8s.Create(ctx, a)).To(Succeed())
	return a
}
