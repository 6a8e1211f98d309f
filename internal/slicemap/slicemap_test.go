package slicemap

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

const (
	allocated = slicerv1alpha1.SliceAllocated
	free      = slicerv1alpha1.SliceFree
)

func TestBuildGPU(t *testing.T) {
	// One node, one GPU; each case checks the GPU entry (bar, columns, slices, problems).
	cases := map[string]struct {
		gpu    slicerv1alpha1.GPUStatus
		allocs []slicerv1alpha1.SliceAllocation
		pods   []corev1.Pod
		want   GPU
	}{
		"empty H100 has 8 free memory slices": {
			gpu: gpu(0, gpu0, "H100-80GB"),
			want: GPU{Index: 0, UUID: gpu0, Model: "H100-80GB", MIGMode: "Enabled", Health: "Healthy",
				MemorySlices: 8, Columns: make([]string, 8), Bar: "[.|.|.|.|.|.|.|.]", Slices: []Slice{}},
		},
		"A30 has 4 memory slices": {
			gpu: gpu(1, gpu1, "A30-24GB", slice("2g.12gb", 2, 2, free, mig0, 1, 0, "", "")),
			want: GPU{Index: 1, UUID: gpu1, Model: "A30-24GB", MIGMode: "Enabled", Health: "Healthy",
				MemorySlices: 4, Columns: []string{"", "", "a", "a"}, Bar: "[.|.|a a]",
				Slices: []Slice{{Key: "a", Profile: "2g.12gb", Start: 2, Size: 2, State: "Free", MIGDeviceUUID: mig0, GPUInstanceID: 1}}},
		},
		"slices sorted by start, joined with allocation and pod": {
			gpu: gpu(0, gpu0, "H100-80GB",
				slice("1g.10gb", 4, 1, allocated, mig1, 9, 0, "team-a", "a2"),
				slice("3g.40gb", 0, 4, allocated, mig0, 2, 0, "team-a", "a1"),
				slice("1g.20gb", 6, 2, free, "", 5, 0, "", "")),
			allocs: []slicerv1alpha1.SliceAllocation{
				sliceAlloc("team-a", "a1", "train", "uid-1", "n1", gpu0, "3g.40gb", 0, 4, slicerv1alpha1.AllocationReady),
				sliceAlloc("team-a", "a2", "infer", "uid-2", "n1", gpu0, "1g.10gb", 4, 1, slicerv1alpha1.AllocationReady),
			},
			pods: []corev1.Pod{pod("team-a", "train", "uid-1", corev1.PodRunning), pod("team-a", "infer", "uid-2", corev1.PodPending)},
			want: GPU{Index: 0, UUID: gpu0, Model: "H100-80GB", MIGMode: "Enabled", Health: "Healthy", MemorySlices: 8,
				Columns: []string{"a", "a", "a", "a", "b", "", "c", "c"}, Bar: "[a a a a|b|.|c c]",
				Slices: []Slice{
					{Key: "a", Profile: "3g.40gb", Start: 0, Size: 4, State: "Allocated", MIGDeviceUUID: mig0, GPUInstanceID: 2,
						Allocation: &Allocation{Namespace: "team-a", Name: "a1", State: "Ready", Profile: "3g.40gb", Start: 0, Size: 4, GPUUUID: gpu0, GPUIndex: 0,
							Pod: &Pod{Namespace: "team-a", Name: "train", UID: "uid-1", Phase: "Running"}}},
					{Key: "b", Profile: "1g.10gb", Start: 4, Size: 1, State: "Allocated", MIGDeviceUUID: mig1, GPUInstanceID: 9,
						Allocation: &Allocation{Namespace: "team-a", Name: "a2", State: "Ready", Profile: "1g.10gb", Start: 4, Size: 1, GPUUUID: gpu0, GPUIndex: 0,
							Pod: &Pod{Namespace: "team-a", Name: "infer", UID: "uid-2", Phase: "Pending"}}},
					{Key: "c", Profile: "1g.20gb", Start: 6, Size: 2, State: "Free", GPUInstanceID: 5},
				}},
		},
		"referenced allocation missing, pod missing, pod with another UID": {
			gpu: gpu(0, gpu0, "H100-80GB",
				slice("1g.10gb", 0, 1, allocated, "", 1, 0, "team-a", "gone"),
				slice("1g.10gb", 1, 1, allocated, "", 2, 0, "team-a", "nopod"),
				slice("1g.10gb", 2, 1, allocated, "", 3, 0, "team-a", "stale")),
			allocs: []slicerv1alpha1.SliceAllocation{
				sliceAlloc("team-a", "nopod", "p-missing", "uid-9", "n1", gpu0, "1g.10gb", 1, 1, slicerv1alpha1.AllocationReady),
				sliceAlloc("team-a", "stale", "p-reborn", "uid-old", "n1", gpu0, "1g.10gb", 2, 1, slicerv1alpha1.AllocationReleasing),
			},
			pods: []corev1.Pod{pod("team-a", "p-reborn", "uid-new", corev1.PodRunning)},
			want: GPU{Index: 0, UUID: gpu0, Model: "H100-80GB", MIGMode: "Enabled", Health: "Healthy", MemorySlices: 8,
				Columns: []string{"a", "b", "c", "", "", "", "", ""}, Bar: "[a|b|c|.|.|.|.|.]",
				Slices: []Slice{
					{Key: "a", Profile: "1g.10gb", Start: 0, Size: 1, State: "Allocated", GPUInstanceID: 1,
						Allocation: &Allocation{Namespace: "team-a", Name: "gone", Missing: true, GPUIndex: -1}},
					{Key: "b", Profile: "1g.10gb", Start: 1, Size: 1, State: "Allocated", GPUInstanceID: 2,
						Allocation: &Allocation{Namespace: "team-a", Name: "nopod", State: "Ready", Profile: "1g.10gb", Start: 1, Size: 1, GPUUUID: gpu0, GPUIndex: 0,
							Pod: &Pod{Namespace: "team-a", Name: "p-missing", UID: "uid-9", Missing: true}}},
					{Key: "c", Profile: "1g.10gb", Start: 2, Size: 1, State: "Allocated", GPUInstanceID: 3,
						Allocation: &Allocation{Namespace: "team-a", Name: "stale", State: "Releasing", Profile: "1g.10gb", Start: 2, Size: 1, GPUUUID: gpu0, GPUIndex: 0,
							Pod: &Pod{Namespace: "team-a", Name: "p-reborn", UID: "uid-old", Phase: "Running", UIDMismatch: true}}},
				}},
		},
		"overlapping slices are marked and reported": {
			gpu: gpu(0, gpu0, "H100-80GB",
				slice("2g.20gb", 0, 2, free, "", 1, 0, "", ""),
				slice("1g.10gb", 1, 1, free, "", 2, 0, "", "")),
			want: GPU{Index: 0, UUID: gpu0, Model: "H100-80GB", MIGMode: "Enabled", Health: "Healthy", MemorySlices: 8,
				Columns: []string{"a", "!", "", "", "", "", "", ""}, Bar: "[a|!|.|.|.|.|.|.]",
				Slices: []Slice{
					{Key: "a", Profile: "2g.20gb", Start: 0, Size: 2, State: "Free", GPUInstanceID: 1},
					{Key: "b", Profile: "1g.10gb", Start: 1, Size: 1, State: "Free", GPUInstanceID: 2},
				},
				Problems: []string{"slices cannot coexist: instance 1: cannot create 1g.10gb at {start 1, size 1} on H100-80GB: overlaps an existing instance"}},
		},
		"illegal placement and unknown profile are reported": {
			gpu: gpu(0, gpu0, "H100-80GB",
				slice("3g.40gb", 2, 4, free, "", 1, 0, "", ""),
				slice("1g.6gb", 7, 1, free, "", 2, 0, "", "")),
			want: GPU{Index: 0, UUID: gpu0, Model: "H100-80GB", MIGMode: "Enabled", Health: "Healthy", MemorySlices: 8,
				Columns: []string{"", "", "a", "a", "a", "a", "", "b"}, Bar: "[.|.|a a a a|.|b]",
				Slices: []Slice{
					{Key: "a", Profile: "3g.40gb", Start: 2, Size: 4, State: "Free", GPUInstanceID: 1},
					{Key: "b", Profile: "1g.6gb", Start: 7, Size: 1, State: "Free", GPUInstanceID: 2},
				},
				Problems: []string{
					"placement {start 2, size 4} is not a legal placement of 3g.40gb on H100-80GB (legal starts [0 4], size 4)",
					`profile "1g.6gb" is not a MIG profile of H100-80GB (it has 1g.10gb, 1g.10gb.me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)`,
				}},
		},
		"unknown model has no geometry": {
			gpu: slicerv1alpha1.GPUStatus{Index: 0, UUID: gpu0, MIGMode: slicerv1alpha1.MIGModeNotSupported, Health: slicerv1alpha1.GPUUnhealthy,
				Slices: []slicerv1alpha1.MIGSlice{slice("1g.10gb", 0, 1, free, "", 1, 0, "", "")}},
			want: GPU{Index: 0, UUID: gpu0, MIGMode: "NotSupported", Health: "Unhealthy", Columns: []string{},
				Slices:   []Slice{{Key: "a", Profile: "1g.10gb", Start: 0, Size: 1, State: "Free", GPUInstanceID: 1}},
				Problems: []string{"GPU model not reported: slice geometry cannot be checked"}},
		},
		"slice beyond the GPU is drawn where it fits and reported": {
			gpu: gpu(0, gpu0, "A30-24GB", slice("2g.12gb", 3, 2, free, "", 1, 0, "", "")),
			want: GPU{Index: 0, UUID: gpu0, Model: "A30-24GB", MIGMode: "Enabled", Health: "Healthy", MemorySlices: 4,
				Columns: []string{"", "", "", "a"}, Bar: "[.|.|.|a]",
				Slices:   []Slice{{Key: "a", Profile: "2g.12gb", Start: 3, Size: 2, State: "Free", GPUInstanceID: 1}},
				Problems: []string{"placement {start 3, size 2} is not a legal placement of 2g.12gb on A30-24GB (legal starts [0 2], size 2)"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := Build(Input{
				NodeAccelerators: []slicerv1alpha1.NodeAccelerator{nodeAcc("n1", tc.gpu)},
				SliceAllocations: tc.allocs,
				Pods:             tc.pods,
			}, Options{})
			if len(m.Nodes) != 1 || len(m.Nodes[0].GPUs) != 1 {
				t.Fatalf("want 1 node with 1 GPU, got %+v", m)
			}
			if diff := cmp.Diff(tc.want, m.Nodes[0].GPUs[0]); diff != "" {
				t.Errorf("GPU (-want +got):\n%s", diff)
			}
			if len(m.Nodes[0].Unrealized) != 0 {
				t.Errorf("every allocation is realized, got unrealized %+v", m.Nodes[0].Unrealized)
			}
		})
	}
}

func TestBuildNodes(t *testing.T) {
	n1 := nodeAcc("n1",
		gpu(1, gpu1, "H100-80GB"),
		gpu(0, gpu0, "H100-80GB", slice("1g.10gb", 0, 1, allocated, mig0, 1, 0, "team-a", "a1")))
	n2 := nodeAcc("n2")
	allocs := []slicerv1alpha1.SliceAllocation{
		sliceAlloc("team-a", "a1", "p1", "u1", "n1", gpu0, "1g.10gb", 0, 1, slicerv1alpha1.AllocationReady),
		// On n1's GPU 1, not realized yet.
		sliceAlloc("team-b", "a2", "p2", "u2", "n1", gpu1, "3g.40gb", 4, 4, slicerv1alpha1.AllocationPending),
		// On n1, a GPU the node does not report, failed.
		func() slicerv1alpha1.SliceAllocation {
			a := sliceAlloc("team-a", "a3", "p3", "u3", "n1", "GPU-deadbeef-0000-4000-8000-000000000000", "1g.10gb", 0, 1, slicerv1alpha1.AllocationFailed)
			a.Status.Reason, a.Status.Message = "GPUNotFound", "no such GPU"
			return a
		}(),
		// On a node without a NodeAccelerator, state not written yet.
		sliceAlloc("team-a", "a4", "p4", "u4", "n9", gpu0, "1g.10gb", 0, 1, ""),
	}
	pods := []corev1.Pod{pod("team-a", "p1", "u1", corev1.PodRunning), pod("team-b", "p2", "u2", corev1.PodPending)}
	in := Input{NodeAccelerators: []slicerv1alpha1.NodeAccelerator{n2, n1}, SliceAllocations: allocs, Pods: pods}

	wantN1 := Node{Name: "n1", Driver: "Ready", DriverVersion: "550.54.15",
		GPUs: []GPU{
			{Index: 0, UUID: gpu0, Model: "H100-80GB", MIGMode: "Enabled", Health: "Healthy", MemorySlices: 8,
				Columns: []string{"a", "", "", "", "", "", "", ""}, Bar: "[a|.|.|.|.|.|.|.]",
				Slices: []Slice{{Key: "a", Profile: "1g.10gb", Start: 0, Size: 1, State: "Allocated", MIGDeviceUUID: mig0, GPUInstanceID: 1,
					Allocation: &Allocation{Namespace: "team-a", Name: "a1", State: "Ready", Profile: "1g.10gb", Start: 0, Size: 1, GPUUUID: gpu0, GPUIndex: 0,
						Pod: &Pod{Namespace: "team-a", Name: "p1", UID: "u1", Phase: "Running"}}}}},
			{Index: 1, UUID: gpu1, Model: "H100-80GB", MIGMode: "Enabled", Health: "Healthy", MemorySlices: 8,
				Columns: make([]string, 8), Bar: "[.|.|.|.|.|.|.|.]", Slices: []Slice{}},
		},
		Unrealized: []Allocation{
			{Namespace: "team-a", Name: "a3", State: "Failed", Reason: "GPUNotFound", Message: "no such GPU", Profile: "1g.10gb", Start: 0, Size: 1,
				GPUUUID: "GPU-deadbeef-0000-4000-8000-000000000000", GPUIndex: -1, Pod: &Pod{Namespace: "team-a", Name: "p3", UID: "u3", Missing: true}},
			{Namespace: "team-b", Name: "a2", State: "Pending", Profile: "3g.40gb", Start: 4, Size: 4, GPUUUID: gpu1, GPUIndex: 1,
				Pod: &Pod{Namespace: "team-b", Name: "p2", UID: "u2", Phase: "Pending"}},
		},
		Unprepared: []Claim{},
	}
	wantN2 := Node{Name: "n2", Driver: "Ready", DriverVersion: "550.54.15", GPUs: []GPU{}, Unrealized: []Allocation{}, Unprepared: []Claim{}}
	wantN9 := Node{Name: "n9", NoAccelerator: true, GPUs: []GPU{}, Unprepared: []Claim{}, Unrealized: []Allocation{
		{Namespace: "team-a", Name: "a4", Profile: "1g.10gb", Start: 0, Size: 1, GPUUUID: gpu0, GPUIndex: -1,
			Pod: &Pod{Namespace: "team-a", Name: "p4", UID: "u4", Missing: true}},
	}}

	cases := map[string]struct {
		opts Options
		want Map
	}{
		"all nodes, sorted by name":                {want: Map{Nodes: []Node{wantN1, wantN2, wantN9}, PendingPods: []PendingPod{}}},
		"node filter":                              {opts: Options{Node: "n1"}, want: Map{Nodes: []Node{wantN1}, PendingPods: []PendingPod{}}},
		"filter on a node without NodeAccelerator": {opts: Options{Node: "n9"}, want: Map{Nodes: []Node{wantN9}, PendingPods: []PendingPod{}}},
		"filter on an unknown node":                {opts: Options{Node: "nope"}, want: Map{Nodes: []Node{}, PendingPods: []PendingPod{}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Build(in, tc.opts)); diff != "" {
				t.Errorf("map (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildEmpty(t *testing.T) {
	want := Map{Nodes: []Node{}, PendingPods: []PendingPod{}}
	if diff := cmp.Diff(want, Build(Input{}, Options{})); diff != "" {
		t.Errorf("map (-want +got):\n%s", diff)
	}
}

func TestPendingPods(t *testing.T) {
	const msg = "0/3 nodes are available: 3 Insufficient slicer.dev/mig-3g.40gb."
	limitsOnly := pod("team-a", "limits-only", "u4", corev1.PodPending)
	limitsOnly.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"slicer.dev/mig-1g.10gb": withMIG(pod("", "", "", ""), "x", 2).Spec.Containers[0].Resources.Limits["x"]}
	withInit := withMIG(pod("team-a", "init", "u5", corev1.PodPending), "slicer.dev/mig-1g.10gb", 1)
	initC := withMIG(pod("", "", "", ""), "slicer.dev/mig-1g.10gb", 3).Spec.Containers[0]
	withInit.Spec.InitContainers = []corev1.Container{initC}
	deleting := withMIG(pod("team-a", "deleting", "u7", corev1.PodPending), "slicer.dev/mig-1g.10gb", 1)
	deleting.DeletionTimestamp = &metav1.Time{}
	bound := withMIG(pod("team-b", "bound", "u8", corev1.PodPending), "slicer.dev/mig-1g.10gb.me", 1)
	bound.Spec.NodeName = "n1"
	nominated := unschedulable(withMIG(pod("team-b", "nominated", "u9", corev1.PodPending), "slicer.dev/mig-1g.10gb", 1), "preempting")
	nominated.Status.NominatedNodeName = "n2"

	pods := []corev1.Pod{
		unschedulable(withMIG(withMIG(pod("team-a", "big", "u1", corev1.PodPending), "slicer.dev/mig-3g.40gb", 2), "slicer.dev/mig-1g.10gb", 1), msg),
		withMIG(pod("team-a", "running", "u2", corev1.PodRunning), "slicer.dev/mig-1g.10gb", 1),
		withMIG(pod("team-a", "cpu-only", "u3", corev1.PodPending), "cpu", 1),
		limitsOnly, withInit, deleting, bound, nominated,
		withMIG(pod("team-a", "nvidia", "u6", corev1.PodPending), "nvidia.com/mig-1g.10gb", 1),
	}
	big := PendingPod{Namespace: "team-a", Name: "big", Requests: []ResourceRequest{
		{Resource: "slicer.dev/mig-1g.10gb", Profile: "1g.10gb", Count: 1},
		{Resource: "slicer.dev/mig-3g.40gb", Profile: "3g.40gb", Count: 2},
	}, Reason: "Unschedulable", Message: msg}
	init := PendingPod{Namespace: "team-a", Name: "init", Requests: []ResourceRequest{{Resource: "slicer.dev/mig-1g.10gb", Profile: "1g.10gb", Count: 3}}}
	limits := PendingPod{Namespace: "team-a", Name: "limits-only", Requests: []ResourceRequest{{Resource: "slicer.dev/mig-1g.10gb", Profile: "1g.10gb", Count: 2}}}
	boundWant := PendingPod{Namespace: "team-b", Name: "bound", NodeName: "n1", Requests: []ResourceRequest{{Resource: "slicer.dev/mig-1g.10gb.me", Profile: "1g.10gb+me", Count: 1}}}
	nominatedWant := PendingPod{Namespace: "team-b", Name: "nominated", Nominated: "n2", Reason: "Unschedulable", Message: "preempting",
		Requests: []ResourceRequest{{Resource: "slicer.dev/mig-1g.10gb", Profile: "1g.10gb", Count: 1}}}
	// A pod that keeps the NVIDIA spelling is served by the DRA extended-resource bridge.
	nvidia := PendingPod{Namespace: "team-a", Name: "nvidia", Requests: []ResourceRequest{{Resource: "nvidia.com/mig-1g.10gb", Profile: "1g.10gb", Count: 1}}}

	cases := map[string]struct {
		opts Options
		want []PendingPod
	}{
		"all":                       {want: []PendingPod{big, init, limits, nvidia, boundWant, nominatedWant}},
		"bound to the node":         {opts: Options{Node: "n1"}, want: []PendingPod{boundWant}},
		"nominated to the node":     {opts: Options{Node: "n2"}, want: []PendingPod{nominatedWant}},
		"none for an unrelated one": {opts: Options{Node: "n3"}, want: []PendingPod{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Build(Input{Pods: pods}, tc.opts).PendingPods
			// Explanations are checked in explain_test.go.
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(PendingPod{}, "Explanations")); diff != "" {
				t.Errorf("pending pods (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBar(t *testing.T) {
	cases := map[string]struct {
		columns []string
		want    string
	}{
		"no geometry":         {columns: nil, want: ""},
		"all free":            {columns: []string{"", "", "", ""}, want: "[.|.|.|.]"},
		"whole GPU":           {columns: []string{"a", "a", "a", "a"}, want: "[a a a a]"},
		"neighbours":          {columns: []string{"a", "b", "b", ""}, want: "[a|b b|.]"},
		"overlaps never join": {columns: []string{"!", "!", "a", "a"}, want: "[!|!|a a]"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, bar(tc.columns)); diff != "" {
				t.Errorf("bar (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSliceKey(t *testing.T) {
	got := []string{sliceKey(0), sliceKey(25), sliceKey(26), sliceKey(51), sliceKey(52)}
	if diff := cmp.Diff([]string{"a", "z", "A", "Z", "?"}, got); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
}

func TestMIGRequests(t *testing.T) {
	const r1, r3 = "slicer.dev/mig-1g.10gb", "slicer.dev/mig-3g.40gb"
	always := corev1.ContainerRestartPolicyAlways
	c := func(name string, res string, n int64, sidecar bool) corev1.Container {
		ct := withMIG(pod("", "", "", ""), res, n).Spec.Containers[0]
		ct.Name = name
		if sidecar {
			ct.RestartPolicy = &always
		}
		return ct
	}
	cases := map[string]struct {
		spec corev1.PodSpec
		want []ResourceRequest
	}{
		"containers add up": {
			spec: corev1.PodSpec{Containers: []corev1.Container{c("a", r1, 1, false), c("b", r1, 2, false), c("c", r3, 1, false)}},
			want: []ResourceRequest{{Resource: r1, Profile: "1g.10gb", Count: 3}, {Resource: r3, Profile: "3g.40gb", Count: 1}},
		},
		"an init container that needs more wins": {
			spec: corev1.PodSpec{InitContainers: []corev1.Container{c("i", r1, 4, false)}, Containers: []corev1.Container{c("a", r1, 1, false)}},
			want: []ResourceRequest{{Resource: r1, Profile: "1g.10gb", Count: 4}},
		},
		"the app container reuses the init container's slice": {
			spec: corev1.PodSpec{InitContainers: []corev1.Container{c("i", r1, 1, false)}, Containers: []corev1.Container{c("a", r1, 1, false)}},
			want: []ResourceRequest{{Resource: r1, Profile: "1g.10gb", Count: 1}},
		},
		"a sidecar adds to the containers": {
			spec: corev1.PodSpec{InitContainers: []corev1.Container{c("s", r1, 1, true)}, Containers: []corev1.Container{c("a", r1, 2, false)}},
			want: []ResourceRequest{{Resource: r1, Profile: "1g.10gb", Count: 3}},
		},
		"an init container after a sidecar runs beside it": {
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{c("s", r1, 1, true), c("i", r1, 3, false)},
				Containers:     []corev1.Container{c("a", r1, 1, false)},
			},
			want: []ResourceRequest{{Resource: r1, Profile: "1g.10gb", Count: 4}},
		},
		"a sidecar's resource counts while another resource's init container runs": {
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{c("s", r1, 2, true), c("i", r3, 1, false)},
				Containers:     []corev1.Container{c("a", "cpu", 1, false)},
			},
			want: []ResourceRequest{{Resource: r1, Profile: "1g.10gb", Count: 2}, {Resource: r3, Profile: "3g.40gb", Count: 1}},
		},
		"no MIG resources": {spec: corev1.PodSpec{Containers: []corev1.Container{c("a", "cpu", 1, false)}}},
		"an invalid request is listed without slices": {
			spec: corev1.PodSpec{Containers: []corev1.Container{c("a", "slicer.dev/mig-9g.1gb", 1, false)}}, want: []ResourceRequest{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, _ := migRequests(&tc.spec)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}
