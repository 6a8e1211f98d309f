package mig

import (
	"math/bits"
	"sync"
)

// Derived, immutable per-model tables. Every legal occupancy of a GPU (a set of (profile,
// start) slots that do not overlap and respect the count and media limits) is enumerated once
// per model; per-GPU questions are then array lookups.

const (
	maxProfiles = 8
	maxStarts   = 8
	noSlot      = -1
	noState     = -1
)

// slot is one (profile, start) pair a GPU instance can occupy.
type slot struct {
	prof  int8
	start int8
	size  int8
	mem   uint16 // memory slices covered
}

type modelTable struct {
	spec     *modelSpec
	profiles []Profile
	slots    []slot
	slotOf   [maxProfiles][maxStarts]int8 // [profile][start] -> slot, noSlot
	profMask [maxProfiles]uint32          // slots of each profile
	media    uint32                       // slots of +me profiles

	states  []uint32 // slot bitmask of each state; states[0] is the empty GPU
	take    []int16  // [state*nslots+slot] -> next state, noState when illegal
	release []int16  // [state*nslots+slot] -> previous state, noState when not taken
	used    []uint16 // memory mask of each state
	compute []int8   // compute slices used by each state

	// Per state and profile ([state*nprof+profile]).
	value     []int32 // V(state): weighted future placeability, see value()
	best      []int8  // slicer policy's slot, noSlot when the profile does not fit
	bestCost  []int32 // V(state) - V(state after best)
	firstSlot []int8  // lowest legal start (first-fit)
	nvmlSlot  []int8  // first legal start in NVML order (das-like)

	emptyValue int32
	// capacity[w] for the lower bound weight families, see bound.go.
	boundOnce sync.Once
	bound     *boundTable
	// byCounts maps a count vector to the legal states holding it (repack.go).
	countsOnce sync.Once
	byCounts   map[[maxProfiles]uint8][]int
}

var tableOnce [numModels + 1]sync.Once
var tables [numModels + 1]*modelTable

// tableFor returns the derived table of a model, building it on first use. Nil for an unknown
// model.
func tableFor(m Model) *modelTable {
	if m == 0 || m > numModels {
		return nil
	}
	tableOnce[m].Do(func() { tables[m] = buildTable(m, modelTables[m]) })
	return tables[m]
}

func buildTable(m Model, spec *modelSpec) *modelTable {
	t := &modelTable{spec: spec}
	for pi, ps := range spec.profiles {
		t.profiles = append(t.profiles, Profile{
			Model: m, Name: ps.name, Option: ps.option.String(), NVMLProfile: ps.nvml, SMIProfileID: ps.smi,
			ComputeInstanceProfile: ps.ci, ComputeSlices: ps.compute, MemorySlices: ps.memory,
			MaxCount: ps.maxCount, Starts: ps.starts, MediaExtensions: ps.media(),
			MemoryGB: ps.memoryGiB, MinDriver: ps.minDriver, index: int8(pi),
		})
		for s := range t.slotOf[pi] {
			t.slotOf[pi][s] = noSlot
		}
		for _, st := range ps.starts {
			idx := len(t.slots)
			t.slots = append(t.slots, slot{
				prof: int8(pi), start: int8(st), size: int8(ps.memory),
				mem: uint16(((1 << ps.memory) - 1) << st),
			})
			t.slotOf[pi][st] = int8(idx)
			t.profMask[pi] |= 1 << idx
			if ps.media() {
				t.media |= 1 << idx
			}
		}
	}
	t.enumerate()
	t.derivePolicy()
	return t
}

func (t *modelTable) nslots() int { return len(t.slots) }
func (t *modelTable) nprof() int  { return len(t.profiles) }

// canAdd reports whether slot s can be added to the occupancy bitmask mask.
func (t *modelTable) canAdd(mask uint32, mem uint16, compute int, s int) bool {
	sl := t.slots[s]
	ps := &t.spec.profiles[sl.prof]
	switch {
	case mask&(1<<s) != 0, mem&sl.mem != 0:
		return false
	case bits.OnesCount32(mask&t.profMask[sl.prof]) >= ps.maxCount:
		return false
	case ps.media() && mask&t.media != 0:
		return false
	case compute+ps.compute > t.spec.computeSlices:
		return false
	case int(sl.start)+int(sl.size) > t.spec.memorySlices:
		return false
	}
	return true
}

// enumerate finds every legal state by breadth-first search from the empty GPU.
func (t *modelTable) enumerate() {
	index := map[uint32]int{0: 0}
	t.states = []uint32{0}
	t.used = []uint16{0}
	t.compute = []int8{0}
	for i := 0; i < len(t.states); i++ {
		mask := t.states[i]
		for s := range t.slots {
			if !t.canAdd(mask, t.used[i], int(t.compute[i]), s) {
				continue
			}
			next := mask | 1<<s
			if _, ok := index[next]; !ok {
				index[next] = len(t.states)
				t.states = append(t.states, next)
				t.used = append(t.used, t.used[i]|t.slots[s].mem)
				t.compute = append(t.compute, t.compute[i]+int8(t.spec.profiles[t.slots[s].prof].compute))
			}
		}
	}
	ns := t.nslots()
	t.take = make([]int16, len(t.states)*ns)
	t.release = make([]int16, len(t.states)*ns)
	for i, mask := range t.states {
		for s := 0; s < ns; s++ {
			t.take[i*ns+s], t.release[i*ns+s] = noState, noState
			if t.canAdd(mask, t.used[i], int(t.compute[i]), s) {
				t.take[i*ns+s] = int16(index[mask|1<<s])
			}
			if mask&(1<<s) != 0 {
				t.release[i*ns+s] = int16(index[mask&^(1<<s)])
			}
		}
	}
}

// maxCount is how many more instances of profile p fit in state st (greedy lowest start is
// optimal because a profile's placements are aligned to its size).
func (t *modelTable) maxCount(st int, p int) int {
	n := 0
	ns := t.nslots()
	for {
		next := noState
		for _, start := range t.profiles[p].Starts {
			if s := t.slotOf[p][start]; t.take[st*ns+int(s)] != noState {
				next = int(t.take[st*ns+int(s)])
				break
			}
		}
		if next == noState {
			return n
		}
		st, n = next, n+1
	}
}

// profileWeight is the value of keeping one more instance of a profile placeable. Large
// profiles are the hard ones to place, so they weigh compute × memory slices.
func (t *modelTable) profileWeight(p int) int32 {
	ps := &t.spec.profiles[p]
	return int32(ps.compute * ps.memory)
}

// derivePolicy computes V for every state and the per-(state, profile) choices of the three
// policies.
func (t *modelTable) derivePolicy() {
	nst, np, ns := len(t.states), t.nprof(), t.nslots()
	t.value = make([]int32, nst)
	for st := 0; st < nst; st++ {
		var v int32
		for p := 0; p < np; p++ {
			v += t.profileWeight(p) * int32(t.maxCount(st, p))
		}
		t.value[st] = v
	}
	t.emptyValue = t.value[0]
	t.best = make([]int8, nst*np)
	t.bestCost = make([]int32, nst*np)
	t.firstSlot = make([]int8, nst*np)
	t.nvmlSlot = make([]int8, nst*np)
	for st := 0; st < nst; st++ {
		for p := 0; p < np; p++ {
			k := st*np + p
			t.best[k], t.firstSlot[k], t.nvmlSlot[k] = noSlot, noSlot, noSlot
			bestCost, bestFree := int32(0), -1
			lowest := -1
			for _, start := range t.profiles[p].Starts {
				s := int(t.slotOf[p][start])
				next := t.take[st*ns+s]
				if next == noState {
					continue
				}
				if t.nvmlSlot[k] == noSlot {
					t.nvmlSlot[k] = int8(s)
				}
				if lowest < 0 || start < lowest {
					lowest = start
					t.firstSlot[k] = int8(s)
				}
				cost := t.value[st] - t.value[next]
				// Tie-break: the start that leaves the largest free aligned block, then the
				// highest start (small instances pack from the top, big ones need slot 0).
				free := largestFreeBlock(t.used[next], t.spec.memorySlices)
				if t.best[k] == noSlot || cost < bestCost || (cost == bestCost && free > bestFree) ||
					(cost == bestCost && free == bestFree && start > int(t.slots[t.best[k]].start)) {
					t.best[k], bestCost, bestFree = int8(s), cost, free
				}
			}
			t.bestCost[k] = bestCost
		}
	}
}

// largestFreeBlock is the size of the largest free, size-aligned power-of-two block of memory
// slices.
func largestFreeBlock(used uint16, memSlices int) int {
	for size := memSlices; size >= 1; size /= 2 {
		block := uint16(1<<size - 1)
		for start := 0; start+size <= memSlices; start += size {
			if used&(block<<start) == 0 {
				return size
			}
		}
	}
	return 0
}
