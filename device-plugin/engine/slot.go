package engine

import "github.com/slicer-operator/slicer/internal/mig"

// SlotStep is what realizing a wanted slot takes, given the slices observed: both frontends'
// decision for one slot (the DRA frontend's Prepare, the device-plugin frontend's plan).
type SlotStep int

const (
	// SlotReuse: a complete instance is at the slot.
	SlotReuse SlotStep = iota
	// SlotFinish: a GPU instance without compute instance (or MIG device) is at the slot.
	SlotFinish
	// SlotCreate: nothing is at the slot or overlaps it.
	SlotCreate
	// SlotBlocked: another instance overlaps the slot.
	SlotBlocked
)

// AtSlot says what realizing slot takes among slices, and the index of the slice it names:
// the one at the slot (SlotReuse, SlotFinish) or the first that overlaps it (SlotBlocked); -1
// with SlotCreate. Slices of other GPUs do not count.
func AtSlot(slices []Slice, slot mig.Slot) (SlotStep, int) {
	for i, s := range slices {
		if s.GPU != slot.GPU {
			continue
		}
		if s.Profile == slot.Profile && s.Placement == slot.Placement {
			if s.Complete() {
				return SlotReuse, i
			}
			return SlotFinish, i
		}
		if s.Overlaps(slot) {
			return SlotBlocked, i
		}
	}
	return SlotCreate, -1
}
