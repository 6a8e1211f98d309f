package scheduler_test

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/podrequest"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

const poolLabel = "it.slicer.dev/pool"

// scenario owns a namespace and a pool of nodes (selected by label), so
// scenarios do not see each other's capacity.
type scenario struct {
	ns    string
	pool  string
	nodes []string
	// others are more namespaces of the scenario (other tenants'), cleaned up with it.
	others []string
}

func newScenario(name string) *scenario {
	GinkgoHelper()
	s := &scenario{ns: name, pool: name}
	Expect(k8s.Create(ctx, framework.MakeNamespace(name))).To(Succeed())
	return s
}

// addNode creates a node of the pool with n H100-80GB GPUs (n = 0: no NodeAccelerator).
func (s *scenario) addNode(name string, gpus int) {
	GinkgoHelper()
	Expect(framework.CreateNode(ctx, k8s, builder.Node(name).Label(poolLabel, s.pool).Ready().Obj())).To(Succeed())
	if gpus > 0 {
		Expect(framework.CreateNodeAccelerator(ctx, k8s, framework.MakeNodeAccelerator(name).GPUs("H100-80GB", gpus).Obj())).To(Succeed())
	}
	s.nodes = append(s.nodes, name)
}

// cleanup deletes the pool's pods, nodes and NodeAccelerators.
func (s *scenario) cleanup() {
	GinkgoHelper()
	for _, ns := range append([]string{s.ns}, s.others...) {
		Expect(k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func() int {
			var list slicerv1alpha1.SliceAllocationList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			return len(list.Items)
		}).Should(BeZero(), "allocations of deleted pods are released")
	}
	for _, n := range s.nodes {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, &slicerv1alpha1.NodeAccelerator{ObjectMeta: metav1.ObjectMeta{Name: n}}))).To(Succeed())
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}))).To(Succeed())
	}
}

// pod is a pod of the pool asking for slices (profile → count) in its limits.
func (s *scenario) pod(name string, slices map[string]int64) *corev1.Pod {
	var kv []string
	for p, n := range slices {
		kv = append(kv, mig.ResourceName(p), strconv.FormatInt(n, 10))
	}
	return builder.Pod(s.ns, name).Scheduler(config.DefaultSchedulerName).NodeSelector(poolLabel, s.pool).
		Container("c", builder.Both(kv...)).Obj()
}

func (s *scenario) create(p *corev1.Pod) *corev1.Pod {
	GinkgoHelper()
	Expect(k8s.Create(ctx, p)).To(Succeed())
	return p
}

func (s *scenario) pods() []corev1.Pod {
	GinkgoHelper()
	var list corev1.PodList
	Expect(k8s.List(ctx, &list, client.InNamespace(s.ns))).To(Succeed())
	return list.Items
}

func (s *scenario) get(name string) *corev1.Pod {
	GinkgoHelper()
	var p corev1.Pod
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &p)).To(Succeed())
	return &p
}

func (s *scenario) bound() int {
	n := 0
	for _, p := range s.pods() {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// expectSlicerReasonLeads checks a Pending message keeps the default scheduler's framing
// ("0/N nodes are available: <per-node reasons>. <PostFilter reasons>") and that Slicer's
// explanation is the first PostFilter reason, ahead of preemption's and other plugins' text.
func expectSlicerReasonLeads(msg string) {
	GinkgoWriter.Printf("Pending message: %s\n", msg)
	Expect(msg).To(MatchRegexp(`^0/\d+ nodes are available: `))
	ours := strings.Index(msg, "no GPU has a free slot for")
	Expect(ours).To(BeNumerically(">", 0), msg)
	for _, other := range []string{"preemption:", "no new claims to deallocate"} {
		if i := strings.Index(msg, other); i >= 0 {
			Expect(i).To(BeNumerically(">", ours), "%q comes before Slicer's reason in %q", other, msg)
		}
	}
}

// unschedulable returns the PodScheduled=False message of a pod, or "".
func unschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message
		}
	}
	return ""
}

func (s *scenario) allocations() []slicerv1alpha1.SliceAllocation {
	GinkgoHelper()
	var list slicerv1alpha1.SliceAllocationList
	Expect(k8s.List(ctx, &list, client.InNamespace(s.ns))).To(Succeed())
	return list.Items
}

func (s *scenario) allocationsOf(p *corev1.Pod) []slicerv1alpha1.SliceAllocation {
	var out []slicerv1alpha1.SliceAllocation
	for _, a := range s.allocations() {
		if a.Spec.PodUID == string(p.UID) {
			out = append(out, a)
		}
	}
	return out
}

// checkInvariants checks, cluster-wide:
// I1 no (GPU, placement) held by two pods; I3 legal geometry per GPU;
// I8 every bound MIG pod holds allocations on its node for all its slices.
func checkInvariants() {
	GinkgoHelper()
	var allocs slicerv1alpha1.SliceAllocationList
	Expect(k8s.List(ctx, &allocs)).To(Succeed())
	models, err := framework.GPUModels(ctx, k8s)
	Expect(err).NotTo(HaveOccurred())
	perGPU := map[string][]mig.Instance{}
	holders := map[string][]string{}
	whole := map[string]int{} // whole-GPU allocations per GPU
	for _, a := range allocs.Items {
		key, slot := a.Spec.GPUUUID, migapi.SlotAsWritten(&a.Spec)
		holders[key] = append(holders[key], fmt.Sprintf("%s/%s %s", a.Namespace, a.Spec.PodName, slot))
		if slot.Whole() {
			whole[key]++
			continue
		}
		perGPU[key] = append(perGPU[key], mig.Instance{Profile: string(a.Spec.Profile), Placement: slot.Placement})
	}
	for gpu, n := range whole {
		Expect(n+len(perGPU[gpu])).To(Equal(1), "I1: GPU %s is held whole and more: %s", gpu, strings.Join(holders[gpu], ", "))
	}
	for gpu, inst := range perGPU {
		m, ok := models[gpu]
		if !ok {
			continue // the node's NodeAccelerator is gone (scenario cleanup)
		}
		_, err := mig.NewGPUState(m, inst)
		Expect(err).NotTo(HaveOccurred(), "I1/I3: GPU %s holds %s", gpu, strings.Join(holders[gpu], ", "))
	}
	var pods corev1.PodList
	Expect(k8s.List(ctx, &pods)).To(Succeed())
	var accels slicerv1alpha1.NodeAcceleratorList
	Expect(k8s.List(ctx, &accels)).To(Succeed())
	foreign := map[string]bool{}
	var nodes corev1.NodeList
	Expect(k8s.List(ctx, &nodes)).To(Succeed())
	for _, n := range nodes.Items {
		foreign[n.Name] = !slices.ContainsFunc(accels.Items, func(na slicerv1alpha1.NodeAccelerator) bool { return na.Name == n.Name })
	}
	byPod := map[string][]slicerv1alpha1.SliceAllocation{}
	for _, a := range allocs.Items {
		byPod[a.Spec.PodUID] = append(byPod[a.Spec.PodUID], a)
	}
	for _, p := range pods.Items {
		items, err := plugin.PodRequest(&p)
		Expect(err).NotTo(HaveOccurred())
		want, err := podrequest.WholeGPUs(&p.Spec) // a pod holds whole GPUs or slices, not both
		Expect(err).NotTo(HaveOccurred())
		if foreign[p.Spec.NodeName] {
			want = 0 // NVIDIA's device plugin serves the node: nothing of Slicer's to hold
		}
		for _, it := range items {
			want += it.Count
		}
		if p.Spec.NodeName == "" || want == 0 {
			continue
		}
		have := byPod[string(p.UID)]
		Expect(have).To(HaveLen(want), "I8: bound pod %s/%s holds %d allocations, wants %d", p.Namespace, p.Name, len(have), want)
		for _, a := range have {
			Expect(a.Spec.NodeName).To(Equal(p.Spec.NodeName), "I8: allocation %s on another node", a.Name)
		}
	}
}

func sortedNames(allocs []slicerv1alpha1.SliceAllocation) []string {
	var out []string
	for _, a := range allocs {
		out = append(out, a.Name)
	}
	sort.Strings(out)
	return out
}

// holders counts, over the node's GPUs, the pods the scheduler's snapshot shows holding slices.
func holders(r *running, node string) int {
	n := 0
	for _, hs := range r.plugin.Cache().Holders(node) {
		n += len(hs)
	}
	return n
}

// placeAt creates a pod of namespace ns bound to node with its one allocation at GPU gpu, start
// (as the scheduler's PreBind would have left it), with labels and a PriorityClass ("": none),
// changed by mutate (nil: unchanged), and returns it once the fake agent has made the
// allocation Ready. The agent deletes an allocation whose pod its cache does not show (it
// plays the garbage collector), which a pod created a moment before can be: the allocation is
// then created again.
func placeAt(s *scenario, ns, node, name, profile string, gpu, start int, labels map[string]string, class string, mutate func(*corev1.Pod)) *corev1.Pod {
	GinkgoHelper()
	p := withPriority(s.pod(name, map[string]int64{profile: 1}), class)
	p.Namespace, p.Labels, p.Spec.NodeName = ns, labels, node
	if mutate != nil {
		mutate(p)
	}
	Expect(k8s.Create(ctx, p)).To(Succeed())
	prof, err := mig.H100_80GB.Profile(profile)
	Expect(err).NotTo(HaveOccurred())
	a := framework.MakeSliceAllocation(ns, slicerv1alpha1.AllocationName(p.Name, string(p.UID), 0)).Node(node).
		GPU(framework.GPUUUID(node, gpu)).Profile(profile, int32(start), int32(prof.MemorySlices)).Pod(p.Name, string(p.UID)).Obj()
	a.Labels = map[string]string{slicerv1alpha1.LabelNode: node, slicerv1alpha1.LabelPodUID: string(p.UID)}
	Expect(k8s.Create(ctx, a.DeepCopy())).To(Succeed())
	Eventually(func(g Gomega) {
		var got slicerv1alpha1.SliceAllocation
		err := k8s.Get(ctx, client.ObjectKeyFromObject(a), &got)
		if apierrors.IsNotFound(err) {
			g.Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, a.DeepCopy()))).To(Succeed())
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
	}).Should(Succeed(), "allocation %s Ready", a.Name)
	return p
}
