package mig

import "math/bits"

// Pruning of PlanDefrag's search (defrag.go), exact: a slice with nowhere to go is in no
// feasible removal set (stuck), and GPUs in one state are alike to the search when no
// destination is restricted, so a level's removal sets are tried once per state before its
// GPUs are (stateOpens). planDefrag's noPrune turns both off, for the tests that compare.

// stuck computes keep for model m and the request's profile p. A slice is stuck on its GPU X
// when its profile fits now on no usable GPU but X, and no placement of it on X is clear of
// X's instances now: every destination of a moved slice is free now, on X (the target) or on
// another GPU where its profile fits now (feasible, place), so a stuck slice is in no feasible
// removal set, and a GPU that the removal of its other slices cannot open is no target. Only
// the states that usable GPUs are in are filled in.
func (r *defragRun) stuck(m Model, t *modelTable, p int) []uint32 {
	np := t.nprof()
	dt := defragTableFor(m)
	out := make([]uint32, len(t.states))
	for st, c := range r.hist[m] {
		if c == 0 {
			continue
		}
		mask, used := t.states[st], t.used[st]
		keep := mask
		for rest := mask; rest != 0; rest &= rest - 1 {
			s := bits.TrailingZeros32(rest)
			q := int(t.slots[s].prof)
			if r.fitCount[m][q]-b2i(t.nvmlSlot[st*np+q] != noSlot) > 0 {
				continue
			}
			room := false
			for _, start := range t.profiles[q].Starts {
				if t.slots[t.slotOf[q][start]].mem&used == 0 {
					room = true
					break
				}
			}
			if !room {
				keep &^= 1 << s
			}
		}
		if keep != mask && t.nvmlSlot[int(dt.index[mask&^keep])*np+p] == noSlot {
			keep |= movHopeless
		}
		out[st] = keep
	}
	return out
}

const (
	stateOpen = 1
	stateShut = 2
)

// stateOpens says whether some set of r.k of the slots keep keeps opens the request (profile
// p) on GPU (n, g), whose state is st, with every moved slice placed: the GPUs in one state are
// alike to the search when no destination is restricted (each sees the others of its state as
// GPUs of that state), so this is asked once per state and level. A GPU whose state it shuts
// has no feasible removal set among its movable slots. Its work is bounded per state, not per
// GPU, and is not counted in RemovalSets.
func (r *defragRun) stateOpens(gi, n, g int, t *modelTable, st, p int, keep uint32) bool {
	m := r.nodes[n].GPUs[g].State.model
	if v := r.opens[m][st]; int(v>>2) == r.k {
		return v&stateOpen != 0
	}
	ns, np := t.nslots(), t.nprof()
	var pos [32]int
	npos := 0
	for mask := keep; mask != 0; mask &= mask - 1 {
		pos[npos] = bits.TrailingZeros32(mask)
		npos++
	}
	open := false
	for c := uint32(1)<<r.k - 1; c < 1<<npos && !open; {
		cur := st
		var forbid uint16
		k := 0
		for rest := c; rest != 0; rest &= rest - 1 {
			s := pos[bits.TrailingZeros32(rest)]
			cur = int(t.release[cur*ns+s])
			forbid |= t.slots[s].mem
			r.moved[k] = s
			k++
		}
		if t.nvmlSlot[cur*np+p] != noSlot {
			for _, start := range t.profiles[p].Starts {
				next := t.take[cur*ns+int(t.slotOf[p][start])]
				if next != noState && r.feasible(gi, n, g, t, st, uint16(next), forbid, false) {
					open = true
					break
				}
			}
		}
		low := c & -c
		ripple := c + low
		c = (((ripple ^ c) >> 2) / low) | ripple
	}
	v := uint8(r.k<<2) | stateShut
	if open {
		v = uint8(r.k<<2) | stateOpen
	}
	r.opens[m][st] = v
	return open
}
