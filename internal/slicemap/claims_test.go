package slicemap

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

const (
	dev3gAt0 = "gpu-0-3g-40gb-at-0"
	dev1gAt5 = "gpu-0-1g-10gb-at-5"
	dev1gAt6 = "gpu-1-1g-10gb-at-6"
)

// draInput is a DRA-mode cluster: n1 reports slices held by claims (one joined, one whose
// claim is gone, one made for an earlier claim of the same name), n1 has a claim allocated
// but not prepared, and n7 (no NodeAccelerator yet) has one too.
func draInput() Input {
	n1 := nodeAcc("n1",
		gpu(0, gpu0, "H100-80GB",
			claimSlice("3g.40gb", 0, 4, mig0, 2, "team-a", "c1", "cu1", dev3gAt0),
			claimSlice("1g.10gb", 4, 1, mig1, 9, "team-a", "gone", "gu1", "gpu-0-1g-10gb-at-4"),
			claimSlice("1g.10gb", 5, 1, "", 10, "team-a", "reborn", "old-uid", dev1gAt5)),
		gpu(1, gpu1, "H100-80GB"))
	other := allocatedTo(claim("team-a", "other-driver", "ou1", "gpu.example.com"), "n1", []string{"gpu-0"})
	other.Status.Allocation.Devices.Results[0].Driver = "gpu.example.com"
	return Input{
		NodeAccelerators: []slicerv1alpha1.NodeAccelerator{n1},
		Pods: []corev1.Pod{
			pod("team-a", "p1", "u1", corev1.PodRunning),
			pod("team-b", "p2", "u2", corev1.PodPending),
		},
		ResourceClaims: []resourceapi.ResourceClaim{
			allocatedTo(claim("team-a", "c1", "cu1", "mig-3g.40gb.mig.slicer.dev"), "n1", []string{dev3gAt0}, "p1/u1"),
			allocatedTo(claim("team-a", "reborn", "new-uid", "mig-1g.10gb.mig.slicer.dev"), "n1", []string{dev1gAt5}),
			allocatedTo(claim("team-b", "c2", "cu2", "mig-1g.10gb.mig.slicer.dev"), "n1", []string{dev1gAt6}, "p2/u2", "p9/u9"),
			allocatedTo(claim("team-b", "far", "fu1", "mig-2g.20gb.mig.slicer.dev"), "n7", []string{"gpu-2-2g-20gb-at-4"}),
			allocatedTo(claim("team-b", "bad", "bu1", "mig-1g.10gb.mig.slicer.dev"), "n1", []string{"gpu-5-1g-10gb-at-0", "gpu-x"}),
			claim("team-b", "waiting", "wu1", "mig-1g.10gb.mig.slicer.dev"),
			other,
		},
	}
}

func TestBuildClaims(t *testing.T) {
	m := Build(draInput(), Options{})
	if len(m.Nodes) != 2 {
		t.Fatalf("want nodes n1 and n7, got %+v", m.Nodes)
	}
	n1, n7 := m.Nodes[0], m.Nodes[1]
	var held []*Claim
	for _, s := range n1.GPUs[0].Slices {
		if s.Allocation != nil {
			t.Errorf("slice %s: allocation %+v in DRA mode", s.Key, s.Allocation)
		}
		held = append(held, s.Claim)
	}
	wantHeld := []*Claim{
		{Namespace: "team-a", Name: "c1", UID: "cu1", Device: dev3gAt0, Allocated: true, Profile: "3g.40gb", Start: 0, Size: 4, GPUIndex: 0,
			Pods: []Pod{{Namespace: "team-a", Name: "p1", UID: "u1", Phase: "Running"}}},
		{Namespace: "team-a", Name: "gone", UID: "gu1", Device: "gpu-0-1g-10gb-at-4", Missing: true, Profile: "1g.10gb", Start: 4, Size: 1, GPUIndex: 0, Pods: []Pod{}},
		{Namespace: "team-a", Name: "reborn", UID: "old-uid", Device: dev1gAt5, UIDMismatch: true, Profile: "1g.10gb", Start: 5, Size: 1, GPUIndex: 0, Pods: []Pod{}},
	}
	if diff := cmp.Diff(wantHeld, held); diff != "" {
		t.Errorf("claims of the slices (-want +got):\n%s", diff)
	}
	wantN1 := []Claim{
		// The slice at 5 is an earlier claim's: the new one's device is not prepared.
		{Namespace: "team-a", Name: "reborn", UID: "new-uid", Device: dev1gAt5, Allocated: true, Profile: "1g.10gb", Start: 5, Size: 1, GPUIndex: 0, Pods: []Pod{}},
		// An unparsable device and a GPU the node does not report are shown, with the problem.
		{Namespace: "team-b", Name: "bad", UID: "bu1", Device: "gpu-5-1g-10gb-at-0", Allocated: true, Profile: "1g.10gb", GPUIndex: 5,
			Problem: "the node reports no GPU 5", Pods: []Pod{}},
		{Namespace: "team-b", Name: "bad", UID: "bu1", Device: "gpu-x", Allocated: true, GPUIndex: -1,
			Problem: `device "gpu-x": not a MIG device`, Pods: []Pod{}},
		{Namespace: "team-b", Name: "c2", UID: "cu2", Device: dev1gAt6, Allocated: true, Profile: "1g.10gb", Start: 6, Size: 1, GPUIndex: 1,
			Pods: []Pod{{Namespace: "team-b", Name: "p2", UID: "u2", Phase: "Pending"}, {Namespace: "team-b", Name: "p9", UID: "u9", Missing: true}}},
	}
	if diff := cmp.Diff(wantN1, n1.Unprepared); diff != "" {
		t.Errorf("n1 unprepared (-want +got):\n%s", diff)
	}
	// Without a NodeAccelerator the size is unknown.
	wantN7 := Node{Name: "n7", NoAccelerator: true, GPUs: []GPU{}, Unrealized: []Allocation{}, Unprepared: []Claim{
		{Namespace: "team-b", Name: "far", UID: "fu1", Device: "gpu-2-2g-20gb-at-4", Allocated: true, Profile: "2g.20gb", Start: 4, GPUIndex: 2, Pods: []Pod{}},
	}}
	if diff := cmp.Diff(wantN7, n7); diff != "" {
		t.Errorf("n7 (-want +got):\n%s", diff)
	}
	if got := Build(draInput(), Options{Node: "n7"}).Nodes; len(got) != 1 || got[0].Name != "n7" {
		t.Errorf("node filter n7: got %+v", got)
	}
}

// A claim whose allocation does not hold the device the slice names is shown as such, and its
// real device is listed as not prepared.
func TestBuildClaimOtherDevice(t *testing.T) {
	in := Input{
		NodeAccelerators: []slicerv1alpha1.NodeAccelerator{nodeAcc("n1", gpu(0, gpu0, "H100-80GB",
			claimSlice("3g.40gb", 0, 4, mig0, 2, "ns", "c", "u", dev3gAt0)))},
		ResourceClaims: []resourceapi.ResourceClaim{allocatedTo(claim("ns", "c", "u", "mig-3g.40gb.mig.slicer.dev"), "n1", []string{"gpu-0-3g-40gb-at-4"})},
	}
	n := Build(in, Options{}).Nodes[0]
	if c := n.GPUs[0].Slices[0].Claim; c == nil || c.Allocated || c.Missing || c.UIDMismatch {
		t.Errorf("slice claim = %+v, want present and not allocated this device", c)
	}
	if len(n.Unprepared) != 1 || n.Unprepared[0].Device != "gpu-0-3g-40gb-at-4" || n.Unprepared[0].Size != 4 {
		t.Errorf("unprepared = %+v, want the claim's device at 4", n.Unprepared)
	}
}

func TestWriteTextClaims(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, Build(draInput(), Options{})); err != nil {
		t.Fatal(err)
	}
	want := `NODE n1  driver Ready 550.54.15
  GPU 0  H100-80GB  GPU-11111111-0000-4000-8000-000000000000  MIG Enabled  Healthy  [a a a a|b|c|.|.]  2/8 free
    KEY  PLACEMENT  PROFILE  STATE      MIG DEVICE    GI  CI  HELD BY
    a    0+4        3g.40gb  Allocated  MIG-aaaaaaaa  2   0   claim team-a/c1 → pod team-a/p1 (Running)
    b    4+1        1g.10gb  Allocated  MIG-bbbbbbbb  9   0   claim team-a/gone (not found)
    c    5+1        1g.10gb  Allocated  -             10  0   claim team-a/reborn (other UID: the slice is stale)
  GPU 1  H100-80GB  GPU-22222222-0000-4000-8000-000000000000  MIG Enabled  Healthy  [.|.|.|.|.|.|.|.]  8/8 free
  allocated, not prepared:
    CLAIM          GPU  PROFILE  PLACEMENT  DEVICE              PODS                                        PROBLEM
    team-a/reborn  0    1g.10gb  5+1        gpu-0-1g-10gb-at-5  no pod                                      -
    team-b/bad     5    1g.10gb  0+?        gpu-5-1g-10gb-at-0  no pod                                      the node reports no GPU 5
    team-b/bad     -    -        0+?        gpu-x               no pod                                      device "gpu-x": not a MIG device
    team-b/c2      1    1g.10gb  6+1        gpu-1-1g-10gb-at-6  team-b/p2 (Pending), team-b/p9 (not found)  -

NODE n7  (no NodeAccelerator)
  allocated (no NodeAccelerator says whether prepared):
    CLAIM       GPU  PROFILE  PLACEMENT  DEVICE              PODS    PROBLEM
    team-b/far  2    2g.20gb  4+?        gpu-2-2g-20gb-at-4  no pod  -

PENDING PODS: none
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
}

// A claim allocated a whole GPU (gpu-<index>) is shown on its GPU, held whole with its pods, not
// as a device not prepared; a pending slice pod's explanation finds no room on that GPU, though
// it may still be in MIG mode (Prepare switches it).
func TestBuildWholeGPUClaims(t *testing.T) {
	in := Input{
		NodeAccelerators: []slicerv1alpha1.NodeAccelerator{nodeAcc("n1", gpu(0, gpu0, "H100-80GB"), gpu(1, gpu1, "H100-80GB"))},
		Pods:             []corev1.Pod{pod("ns", "train", "tu", corev1.PodRunning)},
		ResourceClaims:   []resourceapi.ResourceClaim{allocatedTo(claim("ns", "train-gpu", "cu", "gpu.mig.slicer.dev"), "n1", []string{"gpu-1"}, "train/tu")},
	}
	n := Build(in, Options{}).Nodes[0]
	if len(n.Unprepared) != 0 {
		t.Errorf("unprepared %+v, want none", n.Unprepared)
	}
	want := []Claim{{Namespace: "ns", Name: "train-gpu", UID: "cu", Device: "gpu-1", Allocated: true, Whole: true, GPUIndex: 1,
		Pods: []Pod{{Namespace: "ns", Name: "train", UID: "tu", Phase: "Running"}}}}
	if diff := cmp.Diff(want, n.GPUs[1].WholeClaims); diff != "" {
		t.Errorf("GPU 1's whole claims (-want +got):\n%s", diff)
	}
	var b bytes.Buffer
	if err := WriteText(&b, Build(in, Options{})); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"MIG Enabled  Healthy  held whole", "    whole GPU: claim ns/train-gpu  pod ns/train (Running)"} {
		if !bytes.Contains(b.Bytes(), []byte(line)) {
			t.Errorf("text lacks %q:\n%s", line, b.String())
		}
	}
	st, err := occupancy(&in.NodeAccelerators[0].Status.GPUs[1], &n)
	if err != nil || st.FreeComputeSlices() != 0 {
		t.Errorf("GPU 1's occupancy for explanations: %s, %v; want full", st, err)
	}
}
