package engine

import (
	"testing"

	"github.com/slicer-operator/slicer/internal/mig"
)

func TestAtSlot(t *testing.T) {
	at := func(gpu, profile string, start, size int) mig.Slot {
		return mig.Slot{GPU: gpu, Profile: profile, Placement: mig.Placement{Start: start, Size: size}}
	}
	slices := []Slice{
		{Slot: at("GPU-1", "7g.80gb", 0, 8), GI: 0, CI: 0, MIGUUID: "MIG-other-gpu"},
		{Slot: at("GPU-0", "1g.10gb", 3, 1), GI: 1, CI: 0, MIGUUID: "MIG-a"},
		{Slot: at("GPU-0", "3g.40gb", 4, 4), GI: 2, CI: -1},
		{Slot: at("GPU-0", "1g.10gb", 2, 1), GI: 3, CI: 0}, // a compute instance, no MIG device yet
	}
	for _, tc := range []struct {
		name     string
		slot     mig.Slot
		want     SlotStep
		wantSlot int
	}{
		{"a complete instance at the slot is reused", at("GPU-0", "1g.10gb", 3, 1), SlotReuse, 1},
		{"a GPU instance without compute instance is finished", at("GPU-0", "3g.40gb", 4, 4), SlotFinish, 2},
		{"an instance without MIG device is finished", at("GPU-0", "1g.10gb", 2, 1), SlotFinish, 3},
		{"a free slot is created; another GPU's instances do not count", at("GPU-0", "1g.10gb", 0, 1), SlotCreate, -1},
		{"an overlapping instance of another profile blocks, the first in order", at("GPU-0", "4g.40gb", 0, 4), SlotBlocked, 1},
		{"the same start with another profile blocks", at("GPU-0", "1g.20gb", 4, 2), SlotBlocked, 2},
		{"a GPU no slice is on is free", at("GPU-9", "7g.80gb", 0, 8), SlotCreate, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, i := AtSlot(slices, tc.slot); st != tc.want || i != tc.wantSlot {
				t.Errorf("AtSlot = %d, %d; want %d, %d", st, i, tc.want, tc.wantSlot)
			}
		})
	}
}
