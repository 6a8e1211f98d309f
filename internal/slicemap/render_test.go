package slicemap

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// sampleInput is a cluster with a busy node, an empty one, an allocation on a node without a
// NodeAccelerator and pending pods.
func sampleInput() Input {
	n1 := nodeAcc("gpu-node-1",
		gpu(0, gpu0, "H100-80GB",
			slice("3g.40gb", 0, 4, allocated, mig0, 2, 0, "team-a", "train-0"),
			slice("1g.10gb", 4, 1, allocated, mig1, 9, 0, "team-b", "infer-0"),
			slice("1g.20gb", 6, 2, free, "", 5, 0, "", "")),
		gpu(1, gpu1, "H100-80GB", slice("7g.80gb", 0, 8, slicerv1alpha1.SlicePendingDelete, "", 0, 0, "team-a", "old")))
	n2 := nodeAcc("gpu-node-2")
	n2.Status.GPUs = []slicerv1alpha1.GPUStatus{{Index: 0, UUID: "GPU-33333333-0000-4000-8000-000000000000", Model: "A30-24GB",
		MIGMode: slicerv1alpha1.MIGModeEnabledPendingReset, Health: slicerv1alpha1.GPUUnhealthy}}
	failed := sliceAlloc("team-b", "infer-1", "infer-1", "u4", "gpu-node-1", gpu1, "3g.40gb", 4, 4, slicerv1alpha1.AllocationFailed)
	failed.Status.Reason, failed.Status.Message = "CreateFailed", "nvml: insufficient\nresources"
	return Input{
		NodeAccelerators: []slicerv1alpha1.NodeAccelerator{n1, n2},
		SliceAllocations: []slicerv1alpha1.SliceAllocation{
			sliceAlloc("team-a", "train-0", "train-0", "u1", "gpu-node-1", gpu0, "3g.40gb", 0, 4, slicerv1alpha1.AllocationReady),
			sliceAlloc("team-b", "infer-0", "infer-0", "u2", "gpu-node-1", gpu0, "1g.10gb", 4, 1, slicerv1alpha1.AllocationReady),
			sliceAlloc("team-a", "next", "next", "u3", "gpu-node-1", gpu0, "1g.10gb", 5, 1, slicerv1alpha1.AllocationPending),
			failed,
			sliceAlloc("team-c", "lost", "lost", "u5", "gpu-node-9", gpu0, "1g.10gb", 0, 1, slicerv1alpha1.AllocationCreating),
		},
		Pods: []corev1.Pod{
			func() corev1.Pod {
				p := withMIG(pod("team-a", "train-0", "u1", corev1.PodRunning), "slicer.dev/mig-3g.40gb", 1)
				p.DeletionTimestamp = &metav1.Time{}
				return p
			}(),
			withMIG(pod("team-b", "infer-0", "u2-other", corev1.PodRunning), "slicer.dev/mig-1g.10gb", 1),
			withMIG(pod("team-a", "next", "u3", corev1.PodPending), "slicer.dev/mig-1g.10gb", 1),
			unschedulable(withMIG(pod("team-c", "big", "u6", corev1.PodPending), "slicer.dev/mig-7g.80gb", 2),
				"0/2 nodes are available:\n2 Insufficient slicer.dev/mig-7g.80gb."),
		},
	}
}

func TestWriteText(t *testing.T) {
	cases := map[string]struct {
		in   Input
		opts Options
		want string
	}{
		"sample cluster": {in: sampleInput(), want: `NODE gpu-node-1  driver Ready 550.54.15
  GPU 0  H100-80GB  GPU-11111111-0000-4000-8000-000000000000  MIG Enabled  Healthy  [a a a a|b|.|c c]  1/8 free
    KEY  PLACEMENT  PROFILE  STATE      MIG DEVICE    GI  CI  ALLOCATION              POD
    a    0+4        3g.40gb  Allocated  MIG-aaaaaaaa  2   0   team-a/train-0 (Ready)  team-a/train-0 (Running, terminating)
    b    4+1        1g.10gb  Allocated  MIG-bbbbbbbb  9   0   team-b/infer-0 (Ready)  team-b/infer-0 (Running, other UID: allocation is stale)
    c    6+2        1g.20gb  Free       -             5   0   -                       -
  GPU 1  H100-80GB  GPU-22222222-0000-4000-8000-000000000000  MIG Enabled  Healthy  [a a a a a a a a]  0/8 free
    KEY  PLACEMENT  PROFILE  STATE          MIG DEVICE  GI  CI  ALLOCATION              POD
    a    0+8        7g.80gb  PendingDelete  -           0   0   team-a/old (not found)  -
  not realized:
    ALLOCATION      GPU  PROFILE  PLACEMENT  STATE    POD                         REASON
    team-a/next     0    1g.10gb  5+1        Pending  team-a/next (Pending)       -
    team-b/infer-1  1    3g.40gb  4+4        Failed   team-b/infer-1 (not found)  CreateFailed: nvml: insufficient resources

NODE gpu-node-2  driver Ready 550.54.15
  GPU 0  A30-24GB  GPU-33333333-0000-4000-8000-000000000000  MIG EnabledPendingReset  Unhealthy  [.|.|.|.]  4/4 free

NODE gpu-node-9  (no NodeAccelerator)
  not realized:
    ALLOCATION   GPU                         PROFILE  PLACEMENT  STATE     POD                      REASON
    team-c/lost  GPU-11111111 (not on node)  1g.10gb  0+1        Creating  team-c/lost (not found)  -

PENDING PODS
  POD          REQUESTS    NODE  REASON
  team-a/next  1g.10gb x1  -     -
  team-c/big   7g.80gb x2  -     Unschedulable: 0/2 nodes are available: 2 Insufficient slicer.dev/mig-7g.80gb.

WHY PENDING (Slicer's view of the GPUs above)
  team-c/big  7g.80gb: none of 3 GPUs can take one now
    gpu-node-1 GPU 0  full          only 1 compute slices free, 7g.80gb needs 7
    gpu-node-1 GPU 1  inconsistent  its slices and allocations do not add up: instance 1: cannot create 3g.40gb at {start 4, size 4} on H100-80GB: overlaps an existing instance
    gpu-node-2 GPU 0  migDisabled   MIG mode is EnabledPendingReset
`},
		"one node, nothing pending": {in: sampleInput(), opts: Options{Node: "gpu-node-2"}, want: `NODE gpu-node-2  driver Ready 550.54.15
  GPU 0  A30-24GB  GPU-33333333-0000-4000-8000-000000000000  MIG EnabledPendingReset  Unhealthy  [.|.|.|.]  4/4 free

PENDING PODS: none
`},
		"empty cluster": {want: "no NodeAccelerators\n\nPENDING PODS: none\n"},
		"node without GPUs, GPU without a model, geometry problems": {
			in: Input{NodeAccelerators: []slicerv1alpha1.NodeAccelerator{
				func() slicerv1alpha1.NodeAccelerator {
					n := nodeAcc("n0")
					n.Status.Driver, n.Status.DriverVersion = "", ""
					return n
				}(),
				nodeAcc("n1",
					slicerv1alpha1.GPUStatus{Index: 0, UUID: "short"},
					gpu(1, gpu1, "A30-24GB", slice("4g.24gb", 0, 4, free, "", 0, 0, "", ""), slice("1g.6gb", 3, 1, free, "", 1, 0, "", ""))),
			}},
			want: `NODE n0  driver -
  no GPUs reported

NODE n1  driver Ready 550.54.15
  GPU 0  -  short  MIG -  -  (no geometry: unknown model)
  GPU 1  A30-24GB  GPU-22222222-0000-4000-8000-000000000000  MIG Enabled  Healthy  [a a a|!]  0/4 free
    ! slices cannot coexist: instance 1: cannot create 1g.6gb at {start 3, size 1} on A30-24GB: overlaps an existing instance
    KEY  PLACEMENT  PROFILE  STATE  MIG DEVICE  GI  CI  ALLOCATION  POD
    a    0+4        4g.24gb  Free   -           0   0   -           -
    b    3+1        1g.6gb   Free   -           1   0   -           -

PENDING PODS: none
`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteText(&b, Build(tc.in, tc.opts)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("text (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteJSON(t *testing.T) {
	in := Input{
		NodeAccelerators: []slicerv1alpha1.NodeAccelerator{nodeAcc("n1", gpu(0, gpu0, "A30-24GB", slice("2g.12gb", 0, 2, allocated, mig0, 1, 0, "ns", "a1")))},
		SliceAllocations: []slicerv1alpha1.SliceAllocation{sliceAlloc("ns", "a1", "p1", "u1", "n1", gpu0, "2g.12gb", 0, 2, slicerv1alpha1.AllocationReady)},
		Pods:             []corev1.Pod{pod("ns", "p1", "u1", corev1.PodRunning)},
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, Build(in, Options{})); err != nil {
		t.Fatal(err)
	}
	want := `{
  "nodes": [
    {
      "name": "n1",
      "driver": "Ready",
      "driverVersion": "550.54.15",
      "gpus": [
        {
          "index": 0,
          "uuid": "GPU-11111111-0000-4000-8000-000000000000",
          "model": "A30-24GB",
          "migMode": "Enabled",
          "health": "Healthy",
          "memorySlices": 4,
          "columns": [
            "a",
            "a",
            "",
            ""
          ],
          "bar": "[a a|.|.]",
          "slices": [
            {
              "key": "a",
              "profile": "2g.12gb",
              "start": 0,
              "size": 2,
              "state": "Allocated",
              "migDeviceUUID": "MIG-aaaaaaaa-0000-4000-8000-000000000000",
              "gpuInstanceID": 1,
              "computeInstanceID": 0,
              "allocation": {
                "namespace": "ns",
                "name": "a1",
                "state": "Ready",
                "profile": "2g.12gb",
                "start": 0,
                "size": 2,
                "gpuUUID": "GPU-11111111-0000-4000-8000-000000000000",
                "gpuIndex": 0,
                "pod": {
                  "namespace": "ns",
                  "name": "p1",
                  "uid": "u1",
                  "phase": "Running"
                }
              }
            }
          ]
        }
      ],
      "unrealized": [],
      "unprepared": []
    }
  ],
  "pendingPods": []
}
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("json (-want +got):\n%s", diff)
	}
	var back Map
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Build(in, Options{}), back); diff != "" {
		t.Errorf("JSON does not round-trip (-built +decoded):\n%s", diff)
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after <= 0 {
		return 0, errors.New("disk full")
	}
	w.after--
	return len(p), nil
}

func TestWriteErrors(t *testing.T) {
	m := Build(sampleInput(), Options{})
	for after := 0; after < 3; after++ {
		if err := WriteText(&failingWriter{after: after}, m); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("WriteText with a writer failing after %d writes: got %v, want disk full", after, err)
		}
	}
	if err := WriteJSON(&failingWriter{}, m); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("WriteJSON: got %v, want disk full", err)
	}
}

func TestShortUUID(t *testing.T) {
	got := []string{shortUUID(gpu0), shortUUID(mig1), shortUUID("GPU-123"), shortUUID(""), shortUUID("nodash")}
	want := []string{"GPU-11111111", "MIG-bbbbbbbb", "GPU-123", "", "nodash"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("short UUIDs (-want +got):\n%s", diff)
	}
}

// TestPodTextFinished: a slice still held by a finished pod says it is being released
// (issue 26: a finished pod frees its slices); a pod of another UID stays "stale".
func TestPodTextFinished(t *testing.T) {
	cases := map[string]struct {
		p    Pod
		want string
	}{
		"running":               {p: Pod{Namespace: "ns", Name: "a", Phase: "Running"}, want: "ns/a (Running)"},
		"succeeded":             {p: Pod{Namespace: "ns", Name: "a", Phase: "Succeeded"}, want: "ns/a (Succeeded, finished: allocation is being released)"},
		"failed":                {p: Pod{Namespace: "ns", Name: "a", Phase: "Failed"}, want: "ns/a (Failed, finished: allocation is being released)"},
		"another pod, finished": {p: Pod{Namespace: "ns", Name: "a", Phase: "Failed", UIDMismatch: true}, want: "ns/a (Failed, other UID: allocation is stale)"},
	}
	for name, tc := range cases {
		if got := podText(&tc.p, "allocation"); got != tc.want {
			t.Errorf("%s: podText = %q, want %q", name, got, tc.want)
		}
	}
}
