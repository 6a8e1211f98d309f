package mig

import (
	"testing"
	"time"
)

func TestPodMoveCheck(t *testing.T) {
	owned := PodMove{ControllerKind: "ReplicaSet", Slices: 1}
	cases := []struct {
		name string
		pod  PodMove
		want Immovable
	}{
		{"a ReplicaSet's pod of one slice", owned, Movable},
		{"a Job's pod", PodMove{ControllerKind: "Job", Slices: 1}, Movable},
		{"bare", PodMove{Slices: 1}, ImmovableBare},
		{"bare beats the annotation", PodMove{AnnotatedUnmovable: true, Slices: 1}, ImmovableBare},
		{"a DaemonSet's pod", PodMove{ControllerKind: "DaemonSet", Slices: 1}, ImmovableSameNode},
		{"a mirror pod", PodMove{ControllerKind: "Node", Slices: 1}, ImmovableSameNode},
		{"annotated", PodMove{ControllerKind: "ReplicaSet", AnnotatedUnmovable: true, Slices: 1}, ImmovableAnnotated},
		{"being deleted", PodMove{ControllerKind: "ReplicaSet", Deleting: true, Slices: 1}, ImmovableDeleting},
		{"two slices", PodMove{ControllerKind: "ReplicaSet", Slices: 2}, ImmovableSlices},
		{"no slice", PodMove{ControllerKind: "ReplicaSet"}, ImmovableSlices},
	}
	for _, tc := range cases {
		if got := tc.pod.Check(); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestEvictionCapAdmit(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	c := EvictionCap{Max: 3, Window: time.Hour}
	past := []time.Time{t0, t0.Add(10 * time.Minute), t0.Add(30 * time.Minute)}
	cases := []struct {
		name string
		now  time.Time
		n    int
		kept int
		ok   bool
	}{
		{"full window", t0.Add(40 * time.Minute), 1, 3, false},
		{"nothing more to evict", t0.Add(40 * time.Minute), 0, 3, true},
		{"the first a window old is gone", t0.Add(time.Hour), 1, 2, true},
		{"two are gone, but three more pass", t0.Add(70 * time.Minute), 3, 1, false},
		{"two are gone, two more fit", t0.Add(70 * time.Minute), 2, 1, true},
		{"all gone", t0.Add(2 * time.Hour), 3, 0, true},
	}
	for _, tc := range cases {
		in := append([]time.Time(nil), past...)
		kept, ok := c.Admit(in, tc.now, tc.n)
		if len(kept) != tc.kept || ok != tc.ok {
			t.Errorf("%s: kept %d, ok %v; want %d, %v", tc.name, len(kept), ok, tc.kept, tc.ok)
		}
	}
}
