package mig

import "math/bits"

// The opening-set rule of PlanDefrag's search (defrag.go; the other pruning rules are in
// defrag_prune.go), exact (docs/design/defragmentation.md, "Why the search is exact"): at level
// k a GPU yields a candidate only through an opening set, k of its candidate slots whose
// removal opens the request, all movable and, with destination classes, with somewhere to go.
// The opening sets depend on the GPU's state alone (openingSets, once per state and level);
// the rule asks about one slot at a time, the one in the most sets still alive, and passes the
// GPU over once every set holds a slot that fails (mayOpen). A GPU where some set survives
// goes on to the full search, unchanged.

// maxOpeningSets bounds the k-subsets of one GPU's slots: at most 8 instances, k <= 4.
const maxOpeningSets = 70

// openSets are a state's opening sets for one level: the level (0: not computed) and the sets,
// as slot masks.
type openSets struct {
	k    int
	sets []uint32
}

// openingSets lists the sets of r.k of the slots keep keeps of state st (model m) whose removal
// makes profile p fit, computed once per state and level.
func (r *defragRun) openingSets(m Model, t *modelTable, st, p int, keep uint32) []uint32 {
	if r.osets[m] == nil {
		r.osets[m] = osetsPool.get(len(t.states))
	}
	e := &r.osets[m][st]
	if e.k == r.k {
		return e.sets
	}
	ns := t.nslots()
	pos, npos := setBits(keep)
	e.k, e.sets = r.k, e.sets[:0]
	for c := uint32(1)<<r.k - 1; c < 1<<npos; {
		cur := st
		var sub uint32
		for rest := c; rest != 0; rest &= rest - 1 {
			sl := pos[bits.TrailingZeros32(rest)]
			sub |= 1 << sl
			cur = int(t.release[cur*ns+sl])
		}
		if t.fits(cur, p) {
			e.sets = append(e.sets, sub)
		}
		c = nextSubset(c)
	}
	return e.sets
}

// mayOpen is the opening-set rule for the site at level r.k: false when every opening set of
// the slots keep keeps holds a slot that slotGone rules out, so the full search would examine
// no set that opens the request there. It asks slotGone about as few slots as it can.
func (r *defragRun) mayOpen(s *site, keep uint32) bool {
	sets := r.openingSets(s.m, s.t, s.st, s.p, keep)
	if len(sets) == 1 {
		// One set: its slots lowest first, the order the loop below asks them in.
		for rest := sets[0]; rest != 0; rest &= rest - 1 {
			if r.slotGone(s, bits.TrailingZeros32(rest)) {
				return false
			}
		}
		return true
	}
	var alive [maxOpeningSets]uint32
	na := copy(alive[:], sets)
	var in uint32 // slots found movable and not stuck
	for na > 0 {
		var count [32]uint8
		best, bestCount := -1, uint8(0)
		for _, c := range alive[:na] {
			rest := c &^ in
			if rest == 0 {
				return true // a set whose slots all may go
			}
			for ; rest != 0; rest &= rest - 1 {
				sl := bits.TrailingZeros32(rest)
				if count[sl]++; count[sl] > bestCount || (count[sl] == bestCount && sl < best) {
					best, bestCount = sl, count[sl]
				}
			}
		}
		if !r.slotGone(s, best) {
			in |= 1 << best
			continue
		}
		j := 0
		for _, c := range alive[:na] {
			if c&(1<<best) == 0 {
				alive[j] = c
				j++
			}
		}
		na = j
	}
	return false
}

// The bits of a slot memo entry (gpuMemo.slots, 4 bits per instance start: a GPU's instances
// have distinct starts).
const (
	memoMovAsked  = 1 << iota // the movability callback was asked
	memoMovable               // and said yes
	memoGoneAsked             // nowhere's destination test was made (slotNowhere)
	memoGone                  // and found the slice may go nowhere
)

// slotGone reports whether slot sl of the site's GPU is in no feasible removal set for a reason
// of its own: its slice is not movable, or, with destination classes, it may go nowhere (the
// test destStuck applies to each slot, nowhere). Asked once per slot and call.
func (r *defragRun) slotGone(s *site, sl int) bool {
	if !r.slotMovable(s, sl) {
		return true
	}
	return r.class != nil && r.slotNowhere(s, sl)
}

// slotNowhere is nowhere for slot sl of the site's GPU, asked once per slot and call (slotGone
// and destStuck share the answer), remembered in r.memo[s.gi].slots.
func (r *defragRun) slotNowhere(s *site, sl int) bool {
	sh := 4 * uint(s.t.slots[sl].start)
	e := r.memo[s.gi].slots >> sh
	if e&memoGoneAsked == 0 {
		e = memoGoneAsked
		if r.nowhere(s, sl) {
			e |= memoGone
		}
		r.memo[s.gi].slots |= e << sh
	}
	return e&memoGone != 0
}

// slotMovable asks the movability callback about slot sl of the site's GPU once per call, and
// remembers the answer in r.memo[s.gi].slots, which movableSlots reads too.
func (r *defragRun) slotMovable(s *site, sl int) bool {
	x := s.t.slots[sl]
	sh := 4 * uint(x.start)
	e := r.memo[s.gi].slots >> sh
	if e&memoMovAsked == 0 {
		e = memoMovAsked
		if r.movable != nil && r.movable(s.n, s.g, s.t.profiles[x.prof], Placement{Start: int(x.start), Size: int(x.size)}) {
			e |= memoMovable
		}
		r.memo[s.gi].slots |= e << sh
	}
	return e&memoMovable != 0
}

// setBits lists the positions of mask's set bits, lowest first, and how many there are.
func setBits(mask uint32) (pos [32]int, n int) {
	for ; mask != 0; mask &= mask - 1 {
		pos[n] = bits.TrailingZeros32(mask)
		n++
	}
	return pos, n
}

// nextSubset is the next larger mask with as many set bits as c (Gosper's hack): starting at
// 1<<k - 1 and stopping at 1<<n, it walks every k-subset of n positions.
func nextSubset(c uint32) uint32 {
	low := c & -c
	ripple := c + low
	return (((ripple ^ c) >> 2) / low) | ripple
}
