package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
	"github.com/slicer-operator/slicer/test/builder"
)

// The drivers of these tests: NVIDIA's A100-40GB has 1g.10gb from R525 on.
const (
	oldDriver = "470.82.01"
	newDriver = "535.104.05"
)

// a100s is a node of A100-40GBs whose driver is driver.
func a100s(node string, gpus int, driver string) *slicerv1alpha1.NodeAccelerator {
	na := accel(node, gpus)
	na.Status.DriverVersion = driver
	for i := range na.Status.GPUs {
		na.Status.GPUs[i].Model = slicerv1alpha1.GPUModel(mig.A100_40GB.String())
	}
	return na
}

// holdA100 gives the pod of namespace ns named as its UID's tail ("uid-<name>") the
// A100-40GB slice profile@start on GPU gpu of node.
func holdA100(t *testing.T, p *Plugin, node string, gpu int, uid types.UID, profile string, start int) {
	t.Helper()
	pod := strings.TrimPrefix(string(uid), "uid-")
	prof, err := mig.A100_40GB.Profile(profile)
	if err != nil {
		t.Fatal(err)
	}
	p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: fmt.Sprintf("%s-%d-%d", node, gpu, start), PodName: pod, PodUID: uid, NodeName: node,
		Slot: snapshot.Slot{Slot: mig.Slot{GPU: fmt.Sprintf("GPU-%s%d", node, gpu), Profile: profile,
			Placement: mig.Placement{Start: start, Size: prof.MemorySlices}}}})
}

// TestFilterRefusesAProfileTheDriverLacks: on a node whose driver predates a profile, Filter
// refuses a pod that asks for it, unresolvably (no eviction helps) and saying so, and takes a
// pod of an older profile; the Pending reason names the node's driver rather than calling the
// node closest; a driver upgrade lifts it.
func TestFilterRefusesAProfileTheDriverLacks(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, a100s("n1", 1, oldDriver))
	judge := func(pod *corev1.Pod) (*fwk.Status, *podState) {
		cs, s := preFilter(t, p, pod)
		return p.Filter(ctx, cs, pod, nodeInfo("n1", nil)), s
	}
	st, s := judge(migPod("new", "slicer.dev/mig-1g.10gb", "1"))
	want := "the node's NVIDIA driver " + oldDriver + " has no MIG profile 1g.10gb on A100-40GB: it needs R525 or later"
	if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != want {
		t.Fatalf("Filter 1g.10gb on %s: %v, want UnschedulableAndUnresolvable %q", oldDriver, st, want)
	}
	if got := p.explain("ns", s); !strings.Contains(got, "node n1: "+want) || strings.Contains(got, "closest") {
		t.Fatalf("explain: %q, want the node's driver named, no closest GPU", got)
	}
	if st, _ := judge(migPod("old", "slicer.dev/mig-1g.5gb", "1")); !st.IsSuccess() {
		t.Fatalf("Filter 1g.5gb on %s: %v, want success", oldDriver, st)
	}
	p.cache.SetNodeAccelerator(a100s("n1", 1, newDriver))
	if st, _ := judge(migPod("new", "slicer.dev/mig-1g.10gb", "1")); !st.IsSuccess() {
		t.Fatalf("Filter 1g.10gb on %s: %v, want success", newDriver, st)
	}
}

// TestDefragmentOpensNoRoomTheDriverLacks: a plan neither opens room for the pending pod on a
// node whose driver lacks its profile nor moves a slice to a node whose driver lacks the moved
// profile; with the newer driver each plan exists.
func TestDefragmentOpensNoRoomTheDriverLacks(t *testing.T) {
	replicaAt := func(name, node, profile string) *corev1.Pod {
		return ownedBy("ReplicaSet", builder.Pod("ns", name).UID("uid-"+name).Node(node).
			Container("c", builder.Limits(mig.ResourceName(profile), "1")).Obj())
	}
	for _, tc := range []struct {
		name    string
		drivers [2]string // of n1, n2
		pending string
		setup   func(t *testing.T, p *Plugin) []*corev1.Pod
		plan    bool
	}{
		// n1 GPU 0: four movable 1g.5gb at 0, 2, 4, 6 leave no 1g.10gb; GPU 1 (4g.20gb@0 and
		// 1g.5gb at 4 and 6, not movable) has room for one 1g.5gb at 5: one move opens a 1g.10gb
		// on GPU 0, of n1, whose driver must have it.
		{name: "the room opened", drivers: [2]string{newDriver, newDriver}, pending: "1g.10gb", plan: true},
		{name: "the room opened", drivers: [2]string{oldDriver, newDriver}, pending: "1g.10gb"},
		// n1 GPU 0: a movable 1g.10gb at 0 blocks 7g.40gb; n2 GPU 0 (a 1g.5gb at 0, not movable)
		// has room for it at 2, if n2's driver has 1g.10gb.
		{name: "a moved slice's destination", drivers: [2]string{newDriver, newDriver}, pending: "7g.40gb", plan: true},
		{name: "a moved slice's destination", drivers: [2]string{newDriver, oldDriver}, pending: "7g.40gb"},
	} {
		t.Run(fmt.Sprintf("%s, n1 %s, n2 %s", tc.name, tc.drivers[0], tc.drivers[1]), func(t *testing.T) {
			p := testPlugin(t, a100s("n1", 2, tc.drivers[0]), a100s("n2", 1, tc.drivers[1]))
			var pods []*corev1.Pod
			if tc.pending == "1g.10gb" {
				for _, start := range []int{0, 2, 4, 6} {
					pod := replicaAt(fmt.Sprintf("r%d", start), "n1", "1g.5gb")
					holdA100(t, p, "n1", 0, pod.UID, "1g.5gb", start)
					pods = append(pods, pod)
				}
				holdA100(t, p, "n1", 1, "bare-1", "4g.20gb", 0)
				holdA100(t, p, "n1", 1, "bare-2", "1g.5gb", 4)
				holdA100(t, p, "n1", 1, "bare-3", "1g.5gb", 6)
				holdA100(t, p, "n2", 0, "bare-4", "7g.40gb", 0)
			} else {
				pod := replicaAt("r", "n1", "1g.10gb")
				holdA100(t, p, "n1", 0, pod.UID, "1g.10gb", 0)
				pods = append(pods, pod)
				holdA100(t, p, "n1", 1, "bare-1", "7g.40gb", 0)
				holdA100(t, p, "n2", 0, "bare-2", "1g.5gb", 0)
			}
			withDefrag(t, p, nil, events.NewFakeRecorder(10), pods, nil, nil)
			p.defrag.nodes = nodeLister(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}})
			pending := migPod("big", mig.ResourceName(tc.pending), "1")
			_, s := preFilter(t, p, pending)
			_, got := p.defrag.defragment(context.Background(), pending, s)
			if planned := strings.Contains(got, "1 move(s)"); planned != tc.plan {
				t.Fatalf("words %q: a one-move plan %v, want %v", got, planned, tc.plan)
			}
		})
	}
}
