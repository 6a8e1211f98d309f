package mig

import (
	"math/bits"
	"sync"
)

// defragTable is derived once per model from its state table.
type defragTable struct {
	// minRemovals[state*nprof+profile] is the fewest instances to destroy so the profile fits
	// (ignoring which may move): a lower bound on a plan's moves through a GPU in that state.
	minRemovals []int8
	// index finds a state by its slot bitmask.
	index map[uint32]uint16
}

func defragTableFor(m Model) *defragTable {
	d := &defragTables[m]
	d.once.Do(func() {
		t := tableFor(m)
		ns, np := t.nslots(), t.nprof()
		out := make([]int8, len(t.states)*np)
		index := make(map[uint32]uint16, len(t.states))
		// enumerate() lists the states breadth first from the empty GPU, so every state with
		// one instance fewer comes before.
		for st, mask := range t.states {
			index[mask] = uint16(st)
			for p := 0; p < np; p++ {
				if t.nvmlSlot[st*np+p] != noSlot {
					continue
				}
				best := int8(127)
				for rest := mask; rest != 0; rest &= rest - 1 {
					prev := int(t.release[st*ns+bits.TrailingZeros32(rest)])
					best = min(best, out[prev*np+p]+1)
				}
				out[st*np+p] = best
			}
		}
		d.table = &defragTable{minRemovals: out, index: index}
	})
	return d.table
}

var defragTables [numModels + 1]struct {
	once  sync.Once
	table *defragTable
}

// fits reports whether profile p has a legal placement on a GPU in state st.
func (t *modelTable) fits(st, p int) bool { return t.nvmlSlot[st*len(t.profiles)+p] != noSlot }

// fitsWith reports whether profile p has a legal placement on a GPU holding exactly the slots
// of mask (a subset of a legal state's, so itself one).
func (d *defragTable) fitsWith(t *modelTable, mask uint32, p int) bool {
	return t.fits(int(d.index[mask]), p)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
