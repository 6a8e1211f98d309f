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
