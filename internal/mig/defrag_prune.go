package mig

import "math/bits"

// Pruning of PlanDefrag's search (defrag.go), exact (docs/design/defragmentation.md, "Why the
// search is exact"): a slice with nowhere to go is dropped from the candidates (stuck;
// destStuck with destination classes), and without destinations a level's removal sets are
// tried once per GPU state before its GPUs are (stateOpens). The opening-set rule is in
// defrag_open.go. defragRun.noPrune turns them off, for the tests that compare.

// stuck computes keep for model m and the request's profile p: per state that usable GPUs are
// in, its slots but the stuck ones (a slice whose profile fits now on no usable GPU but its
// own, and on its own GPU at no placement clear of the GPU's instances), with movHopeless when
// the removal of the others cannot open p.
func (r *defragRun) stuck(m Model, t *modelTable, p int) []uint32 {
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
			if r.fitCount[m][q]-b2i(t.fits(st, q)) > 0 {
				continue
			}
			if !roomFor(t, used, q) {
				keep &^= 1 << s
			}
		}
		if keep != mask && !dt.fitsWith(t, mask&^keep, p) {
			keep |= movHopeless
		}
		out[st] = keep
	}
	return out
}

// roomFor reports whether some placement of profile q is clear of the memory slices used.
func roomFor(t *modelTable, used uint16, q int) bool {
	for _, start := range t.profiles[q].Starts {
		if t.slots[t.slotOf[q][start]].mem&used == 0 {
			return true
		}
	}
	return false
}

// destStuck is stuck for one GPU under DefragOptions.Destinations: of the candidate slots use
// of the site's GPU, it drops those that may go nowhere (nowhere), and keeps none when the
// removal of the rest cannot open the request. Once per GPU and call, and only with
// DefragOptions.DestinationClass: it asks about every candidate slot, cheap from a class's
// list, a pass over the nodes with room per slice without one.
func (r *defragRun) destStuck(s *site, use uint32) uint32 {
	if e := r.memo[s.gi].dest; e&movKnown != 0 {
		return e & movSlots
	}
	out := use
	for rest := use; rest != 0; rest &= rest - 1 {
		if sl := bits.TrailingZeros32(rest); r.slotNowhere(s, sl) {
			out &^= 1 << sl
		}
	}
	if out != use && !s.dt.fitsWith(s.t, s.t.states[s.st]&^out, s.p) {
		out = 0
	}
	r.memo[s.gi].dest = out | movKnown
	return out
}

// nowhere is destStuck's test for slot sl of the site's GPU: its slice may go to no allowed GPU
// but its own where its profile fits now, and not to its own GPU either.
func (r *defragRun) nowhere(s *site, sl int) bool {
	t := s.t
	q := int(t.slots[sl].prof)
	if r.class != nil {
		// Read off the slice's class without its destInfo (destOf): others is the class's
		// list without its own GPU, target the class's predicate on its own node.
		from := s.slice(sl)
		if ci := r.classOf(r.class(from), from); ci != nil {
			if ci.allow == nil {
				return false
			}
			self := s.ref()
			for _, ref := range r.classFitsOf(ci, s.m, q) {
				if ref != self {
					return false
				}
			}
			return !roomFor(t, t.used[s.st], q) || !ci.allowed(s.n)
		}
	}
	in := r.destOf(s, sl)
	return in != nil && in.others == 0 && (!in.target || !roomFor(t, t.used[s.st], q))
}

const (
	stateOpen = 1
	stateShut = 2
)

// stateOpens says whether some set of r.k of the slots keep keeps opens the request on the
// site's GPU with every moved slice placed, movability aside: asked once per state and level
// (without destinations the GPUs of one state are alike to the search), and a GPU whose state
// it shuts has no feasible removal set. Its work is not counted in RemovalSets.
func (r *defragRun) stateOpens(s *site, keep uint32) bool {
	if v := r.opens[s.m][s.st]; int(v>>2) == r.k {
		return v&stateOpen != 0
	}
	t := s.t
	ns := t.nslots()
	pos, npos := setBits(keep)
	open := false
	for c := uint32(1)<<r.k - 1; c < 1<<npos && !open; {
		rm := r.remove(t, s.st, c, pos[:npos])
		if t.fits(rm.cur, s.p) {
			for _, start := range t.profiles[s.p].Starts {
				next := t.take[rm.cur*ns+int(t.slotOf[s.p][start])]
				if next != noState && r.feasible(s, uint16(next), rm.forbid, false) {
					open = true
					break
				}
			}
		}
		c = nextSubset(c)
	}
	v := uint8(r.k<<2) | stateShut
	if open {
		v = uint8(r.k<<2) | stateOpen
	}
	r.opens[s.m][s.st] = v
	return open
}
