package slicemap

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

const stockMessage = "0/2 nodes are available: 2 cannot allocate all claims."

// explainInput has one GPU per obstacle on n1, a node whose driver is not ready (n2), and a
// pending pod asking for nvidia.com/mig-3g.40gb through the extended-resource bridge.
func explainInput() Input {
	withHealth := func(g slicerv1alpha1.GPUStatus, h slicerv1alpha1.GPUHealth) slicerv1alpha1.GPUStatus {
		g.Health = h
		return g
	}
	withMode := func(g slicerv1alpha1.GPUStatus, m slicerv1alpha1.MIGMode) slicerv1alpha1.GPUStatus {
		g.MIGMode = m
		return g
	}
	n1 := nodeAcc("n1",
		// 4g + 2g: one compute slice left.
		gpu(0, "GPU-00000000-0000-4000-8000-000000000000", "H100-80GB",
			claimSlice("4g.40gb", 0, 4, "", 1, "ns", "a", "", ""), claimSlice("2g.20gb", 4, 2, "", 2, "ns", "b", "", "")),
		// 1g at 1 and at 5: 6 memory slices free, neither legal 3g start.
		gpu(1, "GPU-11111111-0000-4000-8000-000000000000", "H100-80GB",
			claimSlice("1g.10gb", 1, 1, "", 3, "ns", "c", "", ""), claimSlice("1g.10gb", 5, 1, "", 4, "ns", "d", "", "")),
		withHealth(gpu(2, "GPU-22222222-0000-4000-8000-000000000000", "H100-80GB"), slicerv1alpha1.GPUUnhealthy),
		withMode(gpu(3, "GPU-33333333-0000-4000-8000-000000000000", "H100-80GB"), slicerv1alpha1.MIGModeDisabled),
		gpu(4, "GPU-44444444-0000-4000-8000-000000000000", "A30-24GB"),
		// Empty, but a claim is allocated at 4 and not prepared yet: only 0 is left.
		gpu(5, "GPU-55555555-0000-4000-8000-000000000000", "H100-80GB"))
	n2 := nodeAcc("n2", gpu(0, "GPU-66666666-0000-4000-8000-000000000000", "H100-80GB"))
	n2.Status.Conditions = []metav1.Condition{{Type: slicerv1alpha1.ConditionDriverNotReady, Status: metav1.ConditionTrue, Reason: "Loading"}}
	return Input{
		NodeAccelerators: []slicerv1alpha1.NodeAccelerator{n2, n1},
		ResourceClaims: []resourceapi.ResourceClaim{
			allocatedTo(claim("ns", "next", "nu", "mig-3g.40gb.mig.slicer.dev"), "n1", []string{"gpu-5-3g-40gb-at-4"}, "next-pod/nu"),
		},
		Pods: []corev1.Pod{
			unschedulable(withMIG(pod("ns", "overflow", "ou", corev1.PodPending), "nvidia.com/mig-3g.40gb", 1), stockMessage),
			withMIG(pod("ns", "next-pod", "nu", corev1.PodPending), "nvidia.com/mig-3g.40gb", 1),
		},
	}
}

func TestExplain(t *testing.T) {
	m := Build(explainInput(), Options{})
	if len(m.PendingPods) != 2 {
		t.Fatalf("pending pods: %+v", m.PendingPods)
	}
	// next-pod holds an allocated claim: its binding is under way, nothing to explain.
	if next := m.PendingPods[0]; next.Name != "next-pod" || next.Explanations != nil {
		t.Errorf("next-pod: %+v, want no explanation", next)
	}
	want := []Explanation{{Profile: "3g.40gb", Fits: 1, GPUs: []GPUVerdict{
		{Node: "n1", Index: 0, Obstacle: "full", Reason: "only 1 compute slices free, 3g.40gb needs 3"},
		{Node: "n1", Index: 1, Obstacle: "fragmented", Reason: "no free block of 4 memory slices at a legal start [0 4] (used memory slices .#...#..)"},
		{Node: "n1", Index: 2, Obstacle: "unhealthy", Reason: "GPU is Unhealthy"},
		{Node: "n1", Index: 3, Obstacle: "migDisabled", Reason: "MIG mode is Disabled"},
		{Node: "n1", Index: 4, Obstacle: "model", Reason: "no 3g.40gb profile on A30-24GB"},
		{Node: "n1", Index: 5, Placements: []string{"0+4"}},
		{Node: "n2", Index: 0, Obstacle: "nodeBlocked", Reason: "GPU driver not ready (Loading)"},
	}}}
	if diff := cmp.Diff(want, m.PendingPods[1].Explanations); diff != "" {
		t.Errorf("overflow explanations (-want +got):\n%s", diff)
	}

	// Once the claim's slice exists, GPU 5 is full too.
	in := explainInput()
	in.ResourceClaims = nil
	in.NodeAccelerators[1].Status.GPUs[5].Slices = []slicerv1alpha1.MIGSlice{claimSlice("3g.40gb", 0, 4, "", 1, "ns", "x", "", ""), claimSlice("3g.40gb", 4, 4, "", 2, "ns", "y", "", "")}
	e := Build(in, Options{}).PendingPods[1].Explanations[0]
	if e.Fits != 0 || e.GPUs[5].Obstacle != "countLimit" {
		t.Errorf("with GPU 5 full: %+v", e)
	}
}

// The pods that wait for slices in DRA mode: through the bridge, a claim template (claim not
// generated yet), a generated claim with firstAvailable alternatives, a shared claim with
// allocationMode All; a claim of another driver's class does not make a MIG pod.
func TestPendingDRAPods(t *testing.T) {
	mig1g, mig3g := "mig-1g.10gb.mig.slicer.dev", "mig-3g.40gb.mig.slicer.dev"
	tmpl := resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "two-3g"}}
	tmpl.Spec.Spec = claim("", "", "", mig3g).Spec
	tmpl.Spec.Spec.Devices.Requests[0].Exactly.Count = 2
	generated := claim("ns", "gen-pod-gpu-x7", "gu", "gpu.example.com")
	generated.Spec.Devices.Requests[0].Exactly = nil
	generated.Spec.Devices.Requests[0].FirstAvailable = []resourceapi.DeviceSubRequest{
		{Name: "small", DeviceClassName: mig1g, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		{Name: "whole", DeviceClassName: "gpu.example.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}
	shared := claim("ns", "shared", "su", mig1g)
	shared.Spec.Devices.Requests[0].Exactly.AllocationMode, shared.Spec.Devices.Requests[0].Exactly.Count = resourceapi.DeviceAllocationModeAll, 0
	genPod := withClaim(pod("ns", "gen-pod", "u3", corev1.PodPending), "gpu", "unused-template", true)
	name := "gen-pod-gpu-x7"
	genPod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &name}}
	in := Input{
		Pods: []corev1.Pod{
			unschedulable(withClaim(pod("ns", "tmpl-pod", "u2", corev1.PodPending), "gpu", "two-3g", true), stockMessage),
			genPod,
			withClaim(pod("ns", "shared-pod", "u4", corev1.PodPending), "gpu", "shared", false),
			withClaim(pod("ns", "other-pod", "u5", corev1.PodPending), "gpu", "other", false),
			withMIG(pod("ns", "bridge-pod", "u1", corev1.PodPending), "nvidia.com/mig-1g.10gb", 2),
		},
		ResourceClaims:         []resourceapi.ResourceClaim{generated, shared, claim("ns", "other", "ou", "gpu.example.com")},
		ResourceClaimTemplates: []resourceapi.ResourceClaimTemplate{tmpl},
	}
	got := map[string][]ResourceRequest{}
	for _, p := range Build(in, Options{}).PendingPods {
		got[p.Name] = p.Requests
	}
	want := map[string][]ResourceRequest{
		"bridge-pod": {{Resource: "nvidia.com/mig-1g.10gb", Profile: "1g.10gb", Count: 2}},
		"tmpl-pod":   {{Profile: "3g.40gb", Count: 2, DeviceClass: mig3g, ClaimTemplate: "two-3g", Request: "r0"}},
		"gen-pod":    {{Profile: "1g.10gb", Count: 1, DeviceClass: mig1g, Claim: "gen-pod-gpu-x7", Request: "r0/small", FirstAvailable: true}},
		"shared-pod": {{Profile: "1g.10gb", DeviceClass: mig1g, Claim: "shared", Request: "r0", AllDevices: true}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pending requests (-want +got):\n%s", diff)
	}
}

func TestWriteExplanations(t *testing.T) {
	m := Build(explainInput(), Options{})
	var text bytes.Buffer
	if err := WriteText(&text, m); err != nil {
		t.Fatal(err)
	}
	_, pending, _ := strings.Cut(text.String(), "PENDING PODS\n")
	want := `  POD          REQUESTS    NODE  REASON
  ns/next-pod  3g.40gb x1  -     -
  ns/overflow  3g.40gb x1  -     Unschedulable: ` + stockMessage + `

WHY PENDING (Slicer's view of the GPUs above)
  ns/overflow  3g.40gb: 1 of 7 GPUs can take one now (the pod waits for something else: see its reason)
    n1 GPU 0  full          only 1 compute slices free, 3g.40gb needs 3
    n1 GPU 1  fragmented    no free block of 4 memory slices at a legal start [0 4] (used memory slices .#...#..)
    n1 GPU 2  unhealthy     GPU is Unhealthy
    n1 GPU 3  migDisabled   MIG mode is Disabled
    n1 GPU 4  model         no 3g.40gb profile on A30-24GB
    n1 GPU 5  can take one  at 0+4
    n2 GPU 0  nodeBlocked   GPU driver not ready (Loading)
`
	if diff := cmp.Diff(want, pending); diff != "" {
		t.Errorf("pending section (-want +got):\n%s", diff)
	}

	var js bytes.Buffer
	if err := WriteJSON(&js, m); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"explanations": [`, `"obstacle": "fragmented"`, `"placements": [`, `"unprepared": [`, `"device": "gpu-5-3g-40gb-at-4"`} {
		if !strings.Contains(js.String(), field) {
			t.Errorf("JSON lacks %s", field)
		}
	}
	var back Map
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, back); diff != "" {
		t.Errorf("JSON does not round-trip (-built +decoded):\n%s", diff)
	}
}

// Without any NodeAccelerator (DRA mode before the agent writes one) the explanation says so.
func TestWriteExplanationNoGPU(t *testing.T) {
	in := Input{Pods: []corev1.Pod{unschedulable(withMIG(pod("ns", "p", "u", corev1.PodPending), "nvidia.com/mig-1g.10gb", 1), stockMessage)}}
	var b bytes.Buffer
	if err := WriteText(&b, Build(in, Options{})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "  ns/p  1g.10gb: no NodeAccelerator reports a GPU\n") {
		t.Errorf("text:\n%s", b.String())
	}
}
