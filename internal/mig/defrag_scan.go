package mig

import "math/bits"

// One level of PlanDefrag's search (defrag.go): the GPUs that k removals may open, the sets of
// k of their movable slices whose removal opens the request, the placements of the request
// they open (docs/design/defragmentation.md, Search).

// scan examines level r.k: every GPU that k removals may open, every k-set of its movable
// slices, every placement of the request they open.
func (r *defragRun) scan(budget int) {
	r.examined, r.stopped = 0, false
	visit := false // some GPU is not passed over by its state alone
	for m := Model(1); m <= numModels; m++ {
		if r.dts[m] != nil {
			visit = r.visitStates(m, r.tabs[m], r.dts[m]) || visit
		}
	}
	if !visit {
		return // the walk below would pass over every GPU
	}
	// The usable GPUs of the models that have the request's profile, in node then GPU order:
	// the GPUs a plan may target. Their site is built only past the state's table test.
	gi := -1
	for n := range r.nodes {
		gpus := r.nodes[n].GPUs
		for g := range gpus {
			gi++
			gpu := &gpus[g]
			m := gpu.State.model
			if !gpu.slicesNow() || m == 0 || m > numModels || r.dts[m] == nil {
				continue
			}
			keep := r.visit[m][gpu.State.idx]
			if keep&movHopeless != 0 {
				continue
			}
			s := &site{gi: gi, n: n, g: g, m: m, t: r.tabs[m], dt: r.dts[m], st: int(gpu.State.idx), p: int(r.req.prof[m][0])}
			if r.visitSite(s, keep, budget) {
				return
			}
		}
	}
}

// visitSite is scan's work on one GPU past its state's table test: the other pruning rules,
// then every k-set of its movable slots keep keeps. It returns true when the level is done:
// enough candidates seen, or a work bound reached (r.stopped).
func (r *defragRun) visitSite(s *site, keep uint32, budget int) bool {
	if r.k > ShallowDefragMoves && r.deepLeft >= 0 {
		if r.deepLeft == 0 {
			r.stopped = true
			return true
		}
		r.deepLeft--
	}
	if r.opens[s.m] != nil && r.hist[s.m][s.st] > 1 && !r.stateOpens(s, keep&movSlots) {
		return false
	}
	if !r.noPrune && !r.noOpen && r.memo[s.gi].mov&movKnown == 0 && !r.mayOpen(s, keep&movSlots) {
		return false
	}
	mov := r.movableSlots(s)
	if mov&(movHopeless|movStuck) != 0 || bits.OnesCount32(mov&keep&movSlots) < r.k {
		return false
	}
	use := mov & keep & movSlots
	if r.class != nil && !r.noPrune {
		if use = r.destStuck(s, use); bits.OnesCount32(use) < r.k {
			return false
		}
	}
	pos, npos := setBits(use)
	// Every k-subset of the npos movable slots, as a bitmask over pos (Gosper's hack).
	for c := uint32(1)<<r.k - 1; c < 1<<npos; {
		if r.examined >= budget {
			r.stopped = true
			return true
		}
		r.examined++
		if r.tryRemoval(s, c, pos[:npos]) {
			return true
		}
		c = nextSubset(c)
	}
	return false
}

// visitStates fills r.visit[m] for level r.k: per state index that usable GPUs of model m are
// in, the slots keep keeps (every slot with the pruning rules off), or movHopeless when the
// search passes over every GPU in that state at this level: the fewest removals for the
// request's profile (a table lookup that ignores movability) exceed r.k, or keep is hopeless.
// It is the per-GPU test of scan, made once per state and level. It reports whether some state
// is not passed over.
func (r *defragRun) visitStates(m Model, t *modelTable, dt *defragTable) bool {
	if r.visit[m] == nil {
		r.visit[m] = make([]uint32, len(t.states))
	}
	p, np := int(r.req.prof[m][0]), t.nprof()
	some := false
	for st, c := range r.hist[m] {
		if c == 0 {
			continue
		}
		keep := uint32(movSlots)
		if ks := r.keep[m]; ks != nil {
			keep = ks[st]
		}
		if int(dt.minRemovals[st*np+p]) > r.k {
			keep = movHopeless
		}
		r.visit[m][st] = keep
		some = some || keep&movHopeless == 0
	}
	return some
}

const (
	movSlots    = 1<<29 - 1 // the slot bits of a gpuMemo.mov or keep entry
	movStuck    = 1 << 29   // movHopeless, counting only the movable slots keep keeps
	movKnown    = 1 << 30   // gpuMemo.mov (or .dest) entry computed
	movHopeless = 1 << 31   // the profile does not fit even with every movable slice gone
)

// movableSlots is the slot mask of the site's movable instances, asked of the callback once per
// call and kept in r.memo[s.gi].mov, with movHopeless set when removing all of them would not
// open the profile, movStuck when removing those of them that are not stuck would not.
func (r *defragRun) movableSlots(s *site) uint32 {
	if e := r.memo[s.gi].mov; e&movKnown != 0 {
		return e
	}
	mask := s.t.states[s.st]
	var mov uint32
	for rest := mask; rest != 0; rest &= rest - 1 {
		if sl := bits.TrailingZeros32(rest); r.slotMovable(s, sl) {
			mov |= 1 << sl
		}
	}
	e := mov | movKnown
	switch {
	case mov == 0: // the GPU as it is, which does not fit the profile
		e |= movHopeless
	case mov != mask: // mov == mask: the empty GPU fits every profile
		if !s.dt.fitsWith(s.t, mask&^mov, s.p) {
			e |= movHopeless
		}
	}
	if ks := r.keep[s.m]; ks != nil && e&movHopeless == 0 {
		if use := mov & ks[s.st]; use != mov && !s.dt.fitsWith(s.t, mask&^use, s.p) {
			e |= movStuck
		}
	}
	r.memo[s.gi].mov = e
	return e
}

// removal is a removal set taken off a GPU: the state left, the slots removed (also listed in
// r.moved, r.k of them), the memory slices they held and the compute slices they held.
type removal struct {
	cur     int
	sub     uint32
	forbid  uint16
	compute int
}

// remove takes the slots of c (a mask over pos) off state st of t, listing them in r.moved.
func (r *defragRun) remove(t *modelTable, st int, c uint32, pos []int) removal {
	ns := t.nslots()
	out := removal{cur: st}
	k := 0
	for rest := c; rest != 0; rest &= rest - 1 {
		sl := pos[bits.TrailingZeros32(rest)]
		out.sub |= 1 << sl
		out.cur = int(t.release[out.cur*ns+sl])
		out.compute += t.spec.profiles[t.slots[sl].prof].compute
		out.forbid |= t.slots[sl].mem
		r.moved[k] = sl
		k++
	}
	return out
}

// tryRemoval checks one removal set (c over pos) on the site's GPU. It returns true when enough
// feasible candidates were seen at this level.
func (r *defragRun) tryRemoval(s *site, c uint32, pos []int) bool {
	t := s.t
	rm := r.remove(t, s.st, c, pos)
	if !t.fits(rm.cur, s.p) {
		return false
	}
	ns := t.nslots()
	for _, start := range t.profiles[s.p].Starts {
		slot := int(t.slotOf[s.p][start])
		next := t.take[rm.cur*ns+slot]
		if next == noState {
			continue
		}
		// The target GPU's V before the plan against after it: of two plans that open the
		// request's placement with as many compute slices moved, the one whose GPU keeps more
		// room for what comes next (docs/design/defragmentation.md, Ties).
		cost := t.value[s.st] - t.value[next]
		cand := defragCandidate{found: true, node: s.n, gpu: s.g, gi: s.gi, sub: rm.sub, slot: slot, compute: rm.compute, cost: cost}
		if !r.feasible(s, uint16(next), rm.forbid, false) {
			continue
		}
		if !r.best.found || cand.better(r.best) {
			r.best = cand
		}
		r.ties++
		if r.ties >= defragTies {
			return true
		}
	}
	return false
}

func (c defragCandidate) better(o defragCandidate) bool {
	if c.compute != o.compute {
		return c.compute < o.compute
	}
	return c.cost < o.cost
}
