package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
	"github.com/slicer-operator/slicer/test/builder"
)

// TestPodRequest: the plugin asks podrequest.ForPod (its own tables cover the kubelet's rules);
// here, that the plugin passes the pod through and keeps ForPod's messages.
func TestPodRequest(t *testing.T) {
	pod := func() *builder.PodBuilder { return builder.Pod("ns", "p") }
	cases := []struct {
		name    string
		pod     *corev1.Pod
		want    []mig.RequestItem
		wantErr string
	}{
		{name: "no request", pod: pod().Container("a", builder.Limits("cpu", "1", "nvidia.com/gpu", "1")).Obj()},
		{name: "limits, summed over containers; the init container's slice is reused",
			pod: pod().Init("i", builder.Limits("slicer.dev/mig-1g.10gb", "1")).
				Container("a", builder.Limits("slicer.dev/mig-1g.10gb", "2", "slicer.dev/mig-3g.40gb", "1")).
				Container("b", builder.Limits("slicer.dev/mig-1g.10gb.me", "1")).Obj(),
			want: []mig.RequestItem{{Profile: "1g.10gb", Count: 2}, {Profile: "1g.10gb+me", Count: 1}, {Profile: "3g.40gb", Count: 1}}},
		{name: "requests when no limit", pod: pod().Container("a", builder.Requests("slicer.dev/mig-7g.80gb", "1")).Obj(),
			want: []mig.RequestItem{{Profile: "7g.80gb", Count: 1}}},
		{name: "limit wins over request", pod: pod().Container("a", builder.Both("slicer.dev/mig-2g.20gb", "1")).Obj(),
			want: []mig.RequestItem{{Profile: "2g.20gb", Count: 1}}},
		{name: "unknown profile", pod: pod().Container("a", builder.Limits("slicer.dev/mig-5g.50gb", "1")).Obj(), wantErr: "not a MIG profile of any supported GPU"},
		{name: "fractional", pod: pod().Container("a", builder.Limits("slicer.dev/mig-1g.10gb", "500m")).Obj(), wantErr: "must be a positive integer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodRequest(tc.pod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if hasMIGRequest(tc.pod) != (tc.want != nil) {
				t.Errorf("hasMIGRequest disagrees with PodRequest")
			}
		})
	}
}

func testPlugin(t *testing.T, nas ...*slicerv1alpha1.NodeAccelerator) *Plugin {
	t.Helper()
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Defragmentation off: the tests that exercise it give the plugin its listers (withDefrag).
	p := &Plugin{metrics: m, cache: snapshot.New(logr.Discard(), m), rejected: map[types.UID]*corev1.Pod{}, prebindFailed: map[types.UID]bool{}, held: newNominations()}
	p.defrag = testDefragmenter(p, defragPolicy{mode: slicerv1alpha1.DefragmentationDisabled})
	for _, na := range nas {
		p.cache.SetNodeAccelerator(na)
	}
	return p
}

// accel is a NodeAccelerator of node with gpus healthy H100s (UUIDs GPU-<node>0, GPU-<node>1, ...).
func accel(node string, gpus int) *slicerv1alpha1.NodeAccelerator {
	b := builder.Accelerator(node)
	for i := range gpus {
		b.GPU("GPU-"+node+string(rune('0'+i)), "H100-80GB")
	}
	return b.Obj()
}

// preFilter runs PreFilter for the pod, which must succeed, and returns the cycle state it wrote.
func preFilter(t *testing.T, p *Plugin, pod *corev1.Pod) (fwk.CycleState, *podState) {
	t.Helper()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), cs, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	s, err := readState(cs)
	if err != nil {
		t.Fatal(err)
	}
	return cs, s
}

// migPod is a pod with one container whose limits are the name, value pairs.
func migPod(name string, limits ...string) *corev1.Pod {
	return builder.Pod("ns", name).UID("uid-0000"+name).Container("c", builder.Limits(limits...)).Obj()
}

func nodeInfo(name string, labels map[string]string) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	return ni
}

func TestFilterScoreReserve(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, accel("n1", 1), accel("n2", 2))
	pod := migPod("a", "slicer.dev/mig-4g.40gb", "1")

	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	for _, n := range []string{"n1", "n2"} {
		if st := p.Filter(ctx, cs, pod, nodeInfo(n, nil)); !st.IsSuccess() {
			t.Errorf("Filter %s: %v", n, st)
		}
	}
	for _, tc := range []struct {
		node, want string
		labels     map[string]string
	}{
		{"n3", reasonNoAccelerator, nil},
		{"n1", reasonForeignManager, map[string]string{slicerv1alpha1.LabelNVIDIAMIGConfig: "all-1g.10gb"}},
	} {
		st := p.Filter(ctx, cs, pod, nodeInfo(tc.node, tc.labels))
		if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != tc.want {
			t.Errorf("Filter %s: %v, want %q", tc.node, st, tc.want)
		}
	}
	if st := p.Reserve(ctx, cs, pod, "n1"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	// n1 now has 3 compute slices free; a second 4g does not fit there.
	pod2 := migPod("b", "slicer.dev/mig-4g.40gb", "1")
	cs2 := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs2, pod2, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	st := p.Filter(ctx, cs2, pod2, nodeInfo("n1", nil))
	if st.Code() != fwk.Unschedulable || st.Message() != "no GPU has free room for 1 × 4g.40gb" {
		t.Errorf("Filter n1 after Reserve: %v", st)
	}
	_, pst := p.PostFilter(ctx, cs2, pod2, nil)
	if msg := pst.Message(); !strings.Contains(msg, "closest: node n2 gpu 0 (7 of 7") {
		t.Errorf("PostFilter message %q", msg)
	}
	// A 3g fits n1 (start 4) and scores higher there than on the empty n2:
	// best fit packs used GPUs.
	pod3 := migPod("c", "slicer.dev/mig-3g.40gb", "1")
	cs3 := framework.NewCycleState()
	p.PreFilter(ctx, cs3, pod3, nil)
	s1, _ := p.Score(ctx, cs3, pod3, nodeInfo("n1", nil))
	s2, _ := p.Score(ctx, cs3, pod3, nodeInfo("n2", nil))
	if s1 <= s2 {
		t.Errorf("score n1=%d n2=%d, want n1 > n2", s1, s2)
	}
	// Unreserve is idempotent and frees the slot.
	p.cache.Unreserve(pod.UID)
	p.cache.Unreserve(pod.UID)
	if st := p.Filter(ctx, cs2, pod2, nodeInfo("n1", nil)); !st.IsSuccess() {
		t.Errorf("Filter n1 after Unreserve: %v", st)
	}
	// A pod without a MIG request is skipped at PreFilter.
	if _, st := p.PreFilter(ctx, framework.NewCycleState(), migPod("d", "cpu", "1"), nil); st.Code() != fwk.Skip {
		t.Errorf("PreFilter of a plain pod: %v, want Skip", st)
	}
}

func TestFilterDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, accel("n1", 8))
	pod := migPod("a", "slicer.dev/mig-3g.40gb", "1")
	cs := framework.NewCycleState()
	p.PreFilter(ctx, cs, pod, nil)
	ni := nodeInfo("n1", nil)
	allocs := testing.AllocsPerRun(100, func() {
		if st := p.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
			t.Fatal(st)
		}
		p.Score(ctx, cs, pod, ni)
	})
	if allocs != 0 {
		t.Errorf("Filter+Score allocate %.0f times per call, want 0", allocs)
	}
}

func BenchmarkFilterScore(b *testing.B) {
	ctx := context.Background()
	m, _ := NewMetrics(nil)
	p := &Plugin{metrics: m, cache: snapshot.New(logr.Discard(), m), held: newNominations()}
	p.defrag = testDefragmenter(p, defragPolicy{mode: slicerv1alpha1.DefragmentationDisabled})
	p.cache.SetNodeAccelerator(accel("n1", 8))
	pod := migPod("a", "slicer.dev/mig-3g.40gb", "1")
	cs := framework.NewCycleState()
	p.PreFilter(ctx, cs, pod, nil)
	ni := nodeInfo("n1", nil)
	b.ReportAllocs()
	for b.Loop() {
		p.Filter(ctx, cs, pod, ni)
		p.Score(ctx, cs, pod, ni)
	}
}

// The closest GPU named by PostFilter can host the profile: with an H100 full
// and an empty A100-40GB, a 3g.40gb (H100 only) names the H100, not the
// emptier A100; a profile no GPU offers says which models do.
func TestPostFilterNamesOnlyGPUsOfferingTheProfile(t *testing.T) {
	ctx := context.Background()
	a100 := accel("n2", 1)
	a100.Status.GPUs[0].Model = "A100-40GB"
	p := testPlugin(t, accel("n1", 1), a100)
	full := migPod("full", "slicer.dev/mig-7g.80gb", "1")
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, full, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Reserve(ctx, cs, full, "n1"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	for _, tc := range []struct {
		res, want string
	}{
		{"slicer.dev/mig-3g.40gb", "closest: node n1 gpu 0 (0 of 7"},
		{"slicer.dev/mig-1g.12gb", "no usable MIG GPU offers 1 × 1g.12gb (models that do: "},
	} {
		pod := migPod("p", tc.res, "1")
		cs := framework.NewCycleState()
		if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
			t.Fatalf("PreFilter %s: %v", tc.res, st)
		}
		_, st := p.PostFilter(ctx, cs, pod, nil)
		if msg := st.Message(); !strings.Contains(msg, tc.want) {
			t.Errorf("PostFilter for %s: %q, want it to contain %q", tc.res, msg, tc.want)
		}
	}
}

// The allocation the scheduler commits carries the agent's finalizer from the start, so
// the agent writes nothing to it but its status (docs/design/handoff.md).
func TestAllocationForCarriesTheAgentsFinalizer(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"}}
	a := allocationFor(pod, "n1", snapshot.Slot{Slot: mig.Slot{GPU: "GPU-0", Profile: "1g.10gb", Placement: mig.Placement{Start: 0, Size: 1}}})
	if diff := cmp.Diff([]string{slicerv1alpha1.AllocationFinalizer}, a.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
	if a.Status != (slicerv1alpha1.SliceAllocationStatus{}) {
		t.Errorf("status %+v, want empty: only the agent writes it", a.Status)
	}
}

// testDefragmenter is the test plugin's defragmentation with policy pol, without listers (the
// tests that plan give it theirs: withDefrag).
func testDefragmenter(p *Plugin, pol defragPolicy) *defragmenter {
	d := &defragmenter{policy: pol, cache: p.cache, metrics: p.metrics, log: logr.Discard()}
	d.evictor = &evictor{cache: p.cache, held: p.held, metrics: p.metrics, log: logr.Discard(), policy: pol,
		replacementTimeout: DefaultDefragReplacementTimeout, now: time.Now,
		run: defragRun{pledges: map[types.UID]*pledge{}, plans: map[types.UID]time.Time{}}}
	return d
}

// setDefragPolicy gives the test plugin's defragmentation (planner and evictor) the policy pol.
func setDefragPolicy(p *Plugin, pol defragPolicy) {
	p.defrag.policy, p.defrag.evictor.policy = pol, pol
}

// setClock gives the test plugin one clock, for the rooms held for plans (Plugin.now) and for
// the evictor that makes them.
func setClock(p *Plugin, now func() time.Time) {
	p.now, p.defrag.evictor.now = now, now
}
