package snapshot

import (
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/internal/mig"
)

// TestHoldWhenFree: a reservation whose slots are taken waits, takes nothing, keeps other pods
// off its slots, and is held in the change that frees the last of them; dropped, it frees
// whatever it kept others off.
func TestHoldWhenFree(t *testing.T) {
	c := New(logr.Discard(), nil)
	freed := 0
	c.OnFreed(func() { freed++ })
	c.SetNodeAccelerator(accel("n1", 1))
	slot := func(profile string, start, size int) Slot {
		return Slot{Slot: mig.Slot{GPU: "GPU-n1-a", Profile: profile, Placement: mig.Placement{Start: start, Size: size}}}
	}
	// Two 1g.10gb at 4 and 5 hold the 2g.20gb room at 4-5.
	for i, start := range []int{4, 5} {
		c.SetAllocation(&Allocation{Namespace: "ns", Name: []string{"a-0", "b-0"}[i], PodName: []string{"a", "b"}[i],
			PodUID: types.UID("uid-" + []string{"a", "b"}[i]), NodeName: "n1", Slot: slot("1g.10gb", start, 1)})
	}
	room := &Reservation{PodUID: "pledge", Namespace: "ns", PodName: "replacement", NodeName: "n1", Slots: []Slot{slot("2g.20gb", 4, 2)}}
	held, err := c.HoldWhenFree(room)
	if err != nil || held || !c.Waiting("pledge") || c.ReservationCount() != 0 {
		t.Fatalf("held %v, err %v, waiting %v, %d reservations; want a waiting reservation", held, err, c.Waiting("pledge"), c.ReservationCount())
	}
	c.DeleteAllocation("ns", "a-0")
	if !c.Waiting("pledge") {
		t.Fatal("held while 5 is still taken")
	}
	rival := &Reservation{PodUID: "rival", Namespace: "ns", PodName: "rival", NodeName: "n1", Slots: []Slot{slot("1g.10gb", 4, 1)}}
	if err := c.Reserve(rival); err == nil {
		t.Fatal("a pod took 4, freed in the waiting reservation's room")
	}
	other := &Reservation{PodUID: "other", Namespace: "ns", PodName: "other", NodeName: "n1", Slots: []Slot{slot("1g.10gb", 0, 1)}}
	if err := c.Reserve(other); err != nil {
		t.Fatalf("a pod off the waiting room: %v", err)
	}
	c.DeleteAllocation("ns", "b-0")
	if c.Waiting("pledge") || c.Reservation("pledge") == nil {
		t.Fatal("not held in the change that freed the last of its slots")
	}
	// Dropped while waiting: the room it kept others off is free again, and pods are woken.
	c.Unreserve("pledge")
	c.SetAllocation(&Allocation{Namespace: "ns", Name: "c-0", PodName: "c", PodUID: "uid-c", NodeName: "n1", Slot: slot("1g.10gb", 5, 1)})
	again := &Reservation{PodUID: "pledge-2", Namespace: "ns", PodName: "replacement", NodeName: "n1", Slots: []Slot{slot("2g.20gb", 4, 2)}}
	if held, err := c.HoldWhenFree(again); err != nil || held {
		t.Fatalf("held %v, err %v; want waiting", held, err)
	}
	before := freed
	c.Unreserve("pledge-2")
	if c.Waiting("pledge-2") || freed != before+1 {
		t.Fatalf("waiting %v after Unreserve; woken %d times, want once", c.Waiting("pledge-2"), freed-before)
	}
	if err := c.Reserve(rival); err != nil {
		t.Fatalf("4 is free once the waiting reservation is dropped: %v", err)
	}
}
