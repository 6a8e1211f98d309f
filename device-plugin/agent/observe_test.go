package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig"
)

func podIn(uid string, phase corev1.PodPhase, restarts int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID(uid)},
		Status:     corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: restarts}}},
	}
}

// TestPodEnd is the evidence that releases an allocation (issue 26 item 1): the cache may
// clear an allocation (holds), only the API server's copy may release it (podEndOf).
func TestPodEnd(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	tests := []struct {
		name string
		pod  *corev1.Pod // nil: no pod of that name
		// holds: a cached copy like this keeps the allocation without asking the API server.
		holds bool
		// want: the release from an API server copy like this ("" none).
		want string
	}{
		{name: "running", pod: podIn("u1", corev1.PodRunning, 0), holds: true},
		{name: "pending (not started, or a container waiting to restart)", pod: podIn("u1", corev1.PodPending, 3), holds: true},
		{name: "containers restarting (restartPolicy OnFailure or Always): still Running", pod: podIn("u1", corev1.PodRunning, 5), holds: true},
		{name: "phase not reported yet", pod: podIn("u1", "", 0), holds: true},
		{name: "succeeded", pod: podIn("u1", corev1.PodSucceeded, 0), want: "PodFinished: pod ns/p (UID u1) finished (phase Succeeded)"},
		{name: "failed (after restarts too)", pod: podIn("u1", corev1.PodFailed, 2), want: "PodFinished: pod ns/p (UID u1) finished (phase Failed)"},
		{name: "no pod of that name", want: "PodGone: pod ns/p (UID u1) does not exist"},
		{name: "another pod of that name, running", pod: podIn("u2", corev1.PodRunning, 0), want: "PodGone: pod ns/p is another pod (UID u2) than the allocation's (UID u1)"},
		{name: "another pod of that name, finished: still another pod", pod: podIn("u2", corev1.PodSucceeded, 0), want: "PodGone: pod ns/p is another pod (UID u2) than the allocation's (UID u1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pod != nil {
				if got := holds(tc.pod, "u1"); got != tc.holds {
					t.Errorf("holds = %v, want %v", got, tc.holds)
				}
			}
			got := ""
			if end, ok := podEndOf(key, "u1", tc.pod); ok {
				got = end.Reason() + ": " + end.Why
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("podEndOf (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodEndsPredicate: the pod events that wake the agent.
func TestPodEndsPredicate(t *testing.T) {
	running, done := podIn("u1", corev1.PodRunning, 0), podIn("u1", corev1.PodFailed, 0)
	restarted := podIn("u1", corev1.PodRunning, 1)
	tests := []struct {
		name string
		fire func() bool
		want bool
	}{
		{"create", func() bool { return podEnds.Create(event.CreateEvent{Object: running}) }, false},
		{"delete", func() bool { return podEnds.Delete(event.DeleteEvent{Object: running}) }, true},
		{"Running → Failed", func() bool { return podEnds.Update(event.UpdateEvent{ObjectOld: running, ObjectNew: done}) }, true},
		{"Running → Running, a container restarted", func() bool {
			return podEnds.Update(event.UpdateEvent{ObjectOld: running, ObjectNew: restarted})
		}, false},
		{"Failed → Failed (status update after the end)", func() bool { return podEnds.Update(event.UpdateEvent{ObjectOld: done, ObjectNew: done}) }, false},
	}
	for _, tc := range tests {
		if got := tc.fire(); got != tc.want {
			t.Errorf("%s: fires = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The kubelet names devices by their slot's device ID; the plan by MIG UUID. A device ID whose
// slot has no instance (after a reboot, before it is recreated) and a bare GPU instance name
// no MIG device.
func TestUsageByMIGUUID(t *testing.T) {
	s0 := engine.Slice{Slot: Slot{GPU: "GPU-0", Profile: "1g.10gb", Placement: mig.Placement{Start: 0, Size: 1}}, GI: 1, CI: 0, MIGUUID: "MIG-0"}
	s1 := engine.Slice{Slot: Slot{GPU: "GPU-0", Profile: "1g.10gb+me", Placement: mig.Placement{Start: 1, Size: 1}}, GI: 2, CI: 0, MIGUUID: "MIG-1"}
	legacy := engine.Slice{Slot: Slot{GPU: "GPU-0", Profile: "1g.10gb", Placement: mig.Placement{Start: 6, Size: 1}}, GI: 4, CI: 0, MIGUUID: "MIG-6"}
	bare := engine.Slice{Slot: Slot{GPU: "GPU-0", Profile: "2g.20gb", Placement: mig.Placement{Start: 2, Size: 2}}, GI: 3, CI: -1}
	gone := Slot{GPU: "GPU-0", Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}}
	// legacy's pod was admitted when device IDs were MIG UUIDs.
	got := usageByMIGUUID([]engine.Slice{s0, s1, bare, legacy}, map[string]string{
		"GPU-0_1g.10gb_0": "ns/a", "GPU-0_1g.10gb.me_1": "ns/b", bare.DeviceID(): "ns/c", gone.DeviceID(): "ns/d", "MIG-6": "ns/e",
	})
	if d := cmp.Diff(map[string]string{"MIG-0": "ns/a", "MIG-1": "ns/b", "MIG-6": "ns/e"}, got); d != "" {
		t.Errorf("usage (-want +got):\n%s", d)
	}
	if usageByMIGUUID([]engine.Slice{s0}, nil) != nil {
		t.Error("unknown usage became known")
	}
}
