package slicemap

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// TestPreemptionNote: in DRA mode, a Pending pod no GPU can take now, that evicting a pod of
// lower priority would place, is told it only preemption could place it, and which pod Slicer
// would evict (the lower priority of the two); a pod of lower priority than every holder, and a
// pod Slicer's own scheduler places (slicer.dev/mig-*), are not.
func TestPreemptionNote(t *testing.T) {
	prio := func(p corev1.Pod, v int32) corev1.Pod { p.Spec.Priority = ptr.To(v); return p }
	in := Input{
		NodeAccelerators: []slicerv1alpha1.NodeAccelerator{nodeAcc("n1", gpu(0, gpu0, "H100-80GB",
			claimSlice("3g.40gb", 0, 4, mig0, 2, "ns", "c-a", "ca", "gpu-0-3g-40gb-at-0"),
			claimSlice("3g.40gb", 4, 4, mig1, 1, "ns", "c-b", "cb", "gpu-0-3g-40gb-at-4")))},
		ResourceClaims: []resourceapi.ResourceClaim{
			allocatedTo(claim("ns", "c-a", "ca", "mig-3g.40gb.mig.slicer.dev"), "n1", []string{"gpu-0-3g-40gb-at-0"}, "a/ua"),
			allocatedTo(claim("ns", "c-b", "cb", "mig-3g.40gb.mig.slicer.dev"), "n1", []string{"gpu-0-3g-40gb-at-4"}, "b/ub"),
		},
		Pods: []corev1.Pod{
			prio(withClaim(pod("ns", "a", "ua", corev1.PodRunning), "gpu", "c-a", false), 100),
			prio(withClaim(pod("ns", "b", "ub", corev1.PodRunning), "gpu", "c-b", false), 5),
			prio(withMIG(pod("ns", "high", "uh", corev1.PodPending), "nvidia.com/mig-3g.40gb", 1), 1000),
			prio(withMIG(pod("ns", "low", "ul", corev1.PodPending), "nvidia.com/mig-3g.40gb", 1), 1),
			prio(withMIG(pod("ns", "slicer", "us", corev1.PodPending), "slicer.dev/mig-3g.40gb", 1), 1000),
		},
	}
	m := Build(in, Options{})
	notes := map[string]string{}
	for _, p := range m.PendingPods {
		notes[p.Name] = p.Preemption
	}
	want := "only preemption could place 3g.40gb: evicting ns/b (priorities [5]) on node n1 GPU 0 would free 3g.40gb@4; " +
		"kube-scheduler does not preempt pods for their ResourceClaims, so the pod waits for room freed otherwise"
	if notes["high"] != want {
		t.Errorf("high: got  %q\nwant %q", notes["high"], want)
	}
	if notes["low"] != "" || notes["slicer"] != "" {
		t.Errorf("low %q, slicer %q: want no note", notes["low"], notes["slicer"])
	}
	var text bytes.Buffer
	if err := WriteText(&text, m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "    "+want+"\n") {
		t.Errorf("text output lacks the note:\n%s", text.String())
	}
}
