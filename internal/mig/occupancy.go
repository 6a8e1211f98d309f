package mig

import "fmt"

// Occupant is one thing that takes a slot of a GPU: a MIG instance that exists on it (as the
// node reports it), or a claim on a slot that may not be realized yet (a SliceAllocation, a
// reservation of the scheduler, a device a ResourceClaim was allocated).
type Occupant struct {
	// Instance is the slot taken; its profile in either spelling.
	Instance
	// Holder names who holds the slot (a pod's UID); "" when the occupant names nobody, as an
	// instance the node reports does.
	Holder string
}

// Misfits says what Occupancy does with an occupant that does not fit beside those before it.
type Misfits int

const (
	// FailOnMisfit makes the first occupant that does not fit the error: the occupancy is not
	// known (the scheduler's snapshot, the slice map, the metrics).
	FailOnMisfit Misfits = iota
	// SkipMisfits leaves an occupant that does not fit out and goes on with the next (the DRA
	// publisher, which orders its devices by what fits).
	SkipMisfits
)

// OccupancyFault is why an occupant does not fit.
type OccupancyFault string

const (
	// FaultUnknownProfile: the profile is no MIG profile name, or no supported model has it.
	FaultUnknownProfile OccupancyFault = "unknownProfile"
	// FaultHeldTwice: two holders hold the same slot (a double allocation).
	FaultHeldTwice OccupancyFault = "heldTwice"
	// FaultDoesNotFit: the model has no such profile, the placement is not legal for it, or it
	// overlaps an occupant before it or goes over a count or media-engine limit.
	FaultDoesNotFit OccupancyFault = "doesNotFit"
)

// OccupancyError is the occupant Occupancy stopped at (FailOnMisfit) and why.
type OccupancyError struct {
	// Occupant is the occupant's index in Occupancy's input.
	Occupant int
	Fault    OccupancyFault
	Err      error
	// instance is the occupant's index among the distinct occupants, as NewGPUState numbers
	// its instances.
	instance int
}

func (e *OccupancyError) Error() string {
	if e.Fault == FaultUnknownProfile {
		return e.Err.Error()
	}
	return fmt.Sprintf("instance %d: %v", e.instance, e.Err)
}

func (e *OccupancyError) Unwrap() error { return e.Err }

// Occupancy is the state of a GPU of model m once the occupants, in their order, take their
// slots. It is the one computation of a GPU's occupancy: the scheduler's snapshot, the slice
// map, the DRA publisher and the agent's metrics each list their occupants and call it.
//
// Occupants of one slot (the same profile at the same placement) count once: an instance and
// the claim it realizes, or a claim listed twice. When both name a holder and the holders
// differ, the slot is held twice (FaultHeldTwice). With FailOnMisfit the first occupant that
// does not fit is an *OccupancyError and the state is the zero GPUState; with SkipMisfits an
// occupant that does not fit is left out, so the order decides which of two overlapping
// occupants counts, and the error is nil. An unknown model is an error either way.
func Occupancy(m Model, occupants []Occupant, misfits Misfits) (GPUState, error) {
	if tableFor(m) == nil {
		return GPUState{}, fmt.Errorf("unknown GPU model %d", int(m))
	}
	type taken struct {
		profile   int8
		placement Placement
		holder    string
	}
	var buf [16]taken
	seen := buf[:0]
	s := GPUState{model: m}
	for i, o := range occupants {
		fail := func(f OccupancyFault, err error) error {
			return &OccupancyError{Occupant: i, Fault: f, Err: err, instance: len(seen)}
		}
		p, err := m.Profile(o.Profile)
		if err != nil { // a name ParseProfileName reads (surrounding space) or a fault
			canon, perr := ParseProfileName(o.Profile)
			if perr == nil {
				p, err = m.Profile(canon)
			}
			switch {
			case misfits == SkipMisfits && (perr != nil || err != nil):
				continue
			case perr != nil:
				return GPUState{}, fail(FaultUnknownProfile, perr)
			case err != nil:
				return GPUState{}, fail(FaultDoesNotFit, err)
			}
		}
		dup := false
		for _, t := range seen {
			if t.profile != p.index || t.placement != o.Placement {
				continue
			}
			dup = true
			if t.holder != "" && o.Holder != "" && t.holder != o.Holder && misfits == FailOnMisfit {
				return GPUState{}, fail(FaultHeldTwice, fmt.Errorf("%s at %v is held by %s and by %s", p.Name, o.Placement, t.holder, o.Holder))
			}
			break
		}
		if dup {
			continue
		}
		next, err := s.Take(p, o.Placement)
		if err != nil {
			if misfits == SkipMisfits {
				continue
			}
			return GPUState{}, fail(FaultDoesNotFit, err)
		}
		s = next
		seen = append(seen, taken{profile: p.index, placement: o.Placement, holder: o.Holder})
	}
	return s, nil
}
