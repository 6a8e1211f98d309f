package mig

import "math/bits"

// Where the moved slices of a defragmentation plan go (defrag.go has the search): whether a
// removal set's slices can all be re-created at placements free now (feasible, place), where
// each may go (destOf), and the plan made of the best candidate (materialize, bestUntouched).

// feasible decides whether the r.k slots in r.moved of the site's GPU, whose state after the
// removals and the request's placement is after, can all be re-created at placements free now:
// not overlapping forbid on the target GPU, and on GPUs their restrictions allow. With record it
// fills r.choice for the scarce slices and r.overlay with the GPUs they touch. Only the scarce
// slices, whose profile fits now on fewer than k allowed GPUs other than the target, are placed
// by search; the others always find an untouched GPU (docs/design/defragmentation.md, Search).
func (r *defragRun) feasible(s *site, after uint16, forbid uint16, record bool) bool {
	t := s.t
	nscarce := 0
	for i := 0; i < r.k; i++ {
		q := int(t.slots[r.moved[i]].prof)
		var others int
		r.info[i] = nil
		if r.dest != nil {
			r.info[i] = r.destOf(s, r.moved[i])
		}
		if in := r.info[i]; in != nil {
			others = in.others
		} else {
			others = r.fitCount[s.m][q] - b2i(t.fits(s.st, q)) // the target GPU itself is no "other" GPU
		}
		if others < r.k {
			r.scarce[nscarce] = i
			nscarce++
		}
	}
	r.nover = 1
	r.overlay[0].ref, r.overlay[0].idx = s.ref(), after
	if nscarce == 0 {
		return true
	}
	return r.place(s, forbid, nscarce, 0, record)
}

// place tries every destination of scarce slice i and the ones after it (backtracking).
func (r *defragRun) place(s *site, forbid uint16, nscarce, i int, record bool) bool {
	if i == nscarce {
		return true
	}
	t := s.t
	mi := r.scarce[i]
	q := int(t.slots[r.moved[mi]].prof)
	target := s.ref()
	in := r.info[mi]
	var refs []gpuRef
	if in != nil {
		refs = in.list // complete: a restricted slice is scarce only when others < k <= maxMoves
	} else {
		refs = r.gpusFitting(s.m, q)
	}
	for j := -1; j < len(refs); j++ {
		ref := target
		if j >= 0 {
			ref = refs[j]
			if ref == target {
				continue
			}
		} else if in != nil && !in.target {
			continue
		}
		oi, idx := r.stateOf(ref)
		for _, start := range t.profiles[q].Starts {
			slot := int(t.slotOf[q][start])
			if ref == target && t.slots[slot].mem&forbid != 0 {
				continue // not free now: a moved slice's old place
			}
			next := t.take[idx*t.nslots()+slot]
			if next == noState {
				continue
			}
			at := oi
			if at < 0 {
				at = r.nover
				r.overlay[at].ref = ref
				r.nover++
			}
			r.overlay[at].idx = uint16(next)
			if record {
				r.choice[mi] = SliceAt{Node: int(ref.node), GPU: int(ref.gpu), Profile: t.profiles[q],
					Placement: Placement{Start: start, Size: t.profiles[q].MemorySlices}}
			}
			if r.place(s, forbid, nscarce, i+1, record) {
				return true
			}
			if oi < 0 {
				r.nover--
			} else {
				r.overlay[at].idx = uint16(idx)
			}
		}
	}
	return false
}

// stateOf is a GPU's state on the overlay and its overlay index (-1 when untouched).
func (r *defragRun) stateOf(ref gpuRef) (int, int) {
	for i := 0; i < r.nover; i++ {
		if r.overlay[i].ref == ref {
			return i, int(r.overlay[i].idx)
		}
	}
	return -1, int(r.nodes[ref.node].GPUs[ref.gpu].State.idx)
}

// gpusFitting lists the usable GPUs of model m where profile q fits now. It is built on first use:
// for scarce profiles (fewer than MaxDefragMoves such GPUs) and for restricted slices (destOf).
// One walk over the GPUs builds the lists of every profile of m not built yet: the search asks
// about several profiles (one per moved slice's), each of whose lists would take a walk of its
// own over a crowded cluster's GPUs.
func (r *defragRun) gpusFitting(m Model, q int) []gpuRef {
	if r.fitBuilt[m][q] {
		return r.fitList[m][q]
	}
	t := tableFor(m)
	np := t.nprof()
	// need: the profiles still to list; left: the GPUs their lists still lack.
	var need uint32
	left := 0
	for p := 0; p < np; p++ {
		if !r.fitBuilt[m][p] {
			r.fitBuilt[m][p] = true
			r.fitList[m][p] = nil
			if r.fitCount[m][p] > 0 {
				need |= 1 << p
				left += r.fitCount[m][p]
			}
		}
	}
	if left == 0 {
		return r.fitList[m][q]
	}
	// want, per state present, the profiles of need that fit on it.
	want := make([]uint32, len(t.states))
	for st, c := range r.hist[m] {
		if c == 0 {
			continue
		}
		for rest := need; rest != 0; rest &= rest - 1 {
			if p := bits.TrailingZeros32(rest); t.fits(st, p) {
				want[st] |= 1 << p
			}
		}
	}
scan:
	for n := range r.nodes {
		for g, gpu := range r.nodes[n].GPUs {
			if !gpu.slicesNow() || gpu.State.model != m {
				continue
			}
			for rest := want[gpu.State.idx]; rest != 0; rest &= rest - 1 {
				p := bits.TrailingZeros32(rest)
				r.fitList[m][p] = append(r.fitList[m][p], gpuRef{int32(n), int32(g)})
				if left--; left == 0 {
					break scan
				}
			}
		}
	}
	return r.fitList[m][q]
}

// destOf is where slot sl of the site's GPU may go under r.dest, nil when anywhere. Computed
// once per slice and call: the allowed GPUs where its profile fits now are counted up to
// maxMoves (the most a plentiful slice needs), listed in full below that.
func (r *defragRun) destOf(s *site, sl int) *destInfo {
	key := s.gi*32 + sl
	if in, ok := r.dests[key]; ok {
		return in
	}
	if r.dests == nil {
		r.dests = map[int]*destInfo{}
	}
	from := s.slice(sl)
	var ci *classInfo
	if r.class != nil {
		ci = r.classOf(r.class(from), from)
	}
	var allow func(int) bool
	if ci != nil && ci.allow != nil {
		allow = ci.allowed
	} else if ci == nil {
		if f := r.dest(from); f != nil {
			allow = onceEach(f)
		}
	}
	if allow == nil {
		r.dests[key] = nil
		return nil
	}
	in := &destInfo{allow: allow, target: allow(s.n)}
	self := s.ref()
	q := int(s.t.slots[sl].prof)
	refs, lastOK := r.gpusFitting(s.m, q), true
	if ci != nil {
		// The class's allowed GPUs, up to maxMoves+1 of them: at most one is self, so a
		// slice has maxMoves others when the list is that long, and the list is complete
		// when it is shorter.
		refs = r.classFitsOf(ci, s.m, q)
	}
	last := int32(-1)
	for _, ref := range refs {
		if ref == self {
			continue
		}
		if ci == nil && ref.node != last {
			last, lastOK = ref.node, allow(int(ref.node))
		}
		if !lastOK {
			continue
		}
		in.others++
		if in.others >= r.maxMoves {
			in.list = nil
			break
		}
		in.list = append(in.list, ref)
	}
	r.dests[key] = in
	return in
}

// materialize turns the chosen candidate into a plan: the scarce slices where the exhaustive
// search put them, the others on the untouched GPU of best fit.
func (r *defragRun) materialize(c defragCandidate) DefragPlan {
	s := r.siteOf(c.gi, c.node, c.gpu)
	t := s.t
	pos, _ := setBits(c.sub)
	rm := r.remove(t, s.st, 1<<bits.OnesCount32(c.sub)-1, pos[:])
	r.k = bits.OnesCount32(c.sub)
	after := uint16(t.take[rm.cur*t.nslots()+c.slot])
	for i := range r.choice {
		r.choice[i] = SliceAt{Node: -1}
	}
	r.feasible(&s, after, rm.forbid, true)
	plan := DefragPlan{Moves: make([]Move, r.k)}
	for i := 0; i < r.k; i++ {
		from := s.slice(r.moved[i])
		to := r.choice[i]
		if to.Node < 0 {
			var allow func(int) bool
			if r.info[i] != nil {
				allow = r.info[i].allow
			}
			to = r.bestUntouched(s.m, int(t.slots[r.moved[i]].prof), allow)
		}
		plan.Moves[i] = Move{From: from, To: to}
	}
	plan.Target = s.slice(c.slot)
	return plan
}

// bestUntouched places profile q on the usable GPU of model m, not on the overlay and on a node
// allow accepts (nil: any), where the Slicer policy loses the least future placeability, and
// records it on the overlay.
func (r *defragRun) bestUntouched(m Model, q int, allow func(int) bool) SliceAt {
	t := tableFor(m)
	np := t.nprof()
	best, bestCost := gpuRef{-1, -1}, int32(0)
	for n := range r.nodes {
		for g, gpu := range r.nodes[n].GPUs {
			if !gpu.slicesNow() || gpu.State.model != m {
				continue
			}
			k := int(gpu.State.idx)*np + q
			if t.best[k] == noSlot || (best.node >= 0 && t.bestCost[k] >= bestCost) {
				continue
			}
			ref := gpuRef{int32(n), int32(g)}
			if oi, _ := r.stateOf(ref); oi >= 0 {
				continue
			}
			if allow != nil && !allow(n) {
				continue
			}
			best, bestCost = ref, t.bestCost[k]
		}
	}
	// best.node >= 0 always: a plentiful slice fits on more GPUs than the plan touches
	// (docs/design/defragmentation.md, "Why the search is exact").
	idx := int(r.nodes[best.node].GPUs[best.gpu].State.idx)
	slot := int(t.best[idx*np+q])
	r.overlay[r.nover].ref, r.overlay[r.nover].idx = best, uint16(t.take[idx*t.nslots()+slot])
	r.nover++
	sl := t.slots[slot]
	return SliceAt{Node: int(best.node), GPU: int(best.gpu), Profile: t.profiles[q],
		Placement: Placement{Start: int(sl.start), Size: int(sl.size)}}
}

// onceEach is allow asked at most once per node: the planner may ask a slice's predicate about
// one node several times (its own node, the GPUs of one node), and DestinationFunc promises the
// caller each node once.
func onceEach(allow func(int) bool) func(int) bool {
	seen := map[int]bool{}
	return func(n int) bool {
		ok, asked := seen[n]
		if !asked {
			ok = allow(n)
			seen[n] = ok
		}
		return ok
	}
}
