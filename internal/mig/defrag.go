package mig

import "math/bits"

// Defragmentation planning: a pending single-slice request fits the cluster's free compute and
// memory but no legal placement is left. PlanDefrag finds the fewest moves of movable slices,
// each re-created at a placement that is free now, after which a legal placement is open for
// the request. See docs/design/defragmentation.md.
//
// The model: a move destroys a slice (its pod is evicted) and re-creates it at its destination
// (its replacement lands there). Destinations must be free in the current state (they overlap
// no existing instance, moved or not) and legal together with the other destinations and the
// request's placement, so every reservation of a plan can be taken before anything is evicted.
// Under that model moving a slice off a GPU other than the request's target never helps (its
// freed space may not be used), so a plan moves slices off one GPU only.

// MaxDefragMoves is the most moves one plan may have.
const MaxDefragMoves = 4

// DefaultDefragMoves is the move bound when DefragOptions.MaxMoves is zero.
const DefaultDefragMoves = 2

// DefaultDefragRemovalSets is the work bound when DefragOptions.MaxRemovalSets is zero.
const DefaultDefragRemovalSets = 1 << 15

// defragTies is how many feasible plans of the fewest moves are compared before the best is
// taken (see PlanDefrag's tie-break).
const defragTies = 16

// DefragOptions bound the planner.
type DefragOptions struct {
	// MaxMoves is the most slices a plan may move, 1..MaxDefragMoves (0: DefaultDefragMoves).
	MaxMoves int
	// MaxRemovalSets bounds the work: how many (GPU, set of its movable slices) pairs the
	// planner examines before it gives up (0: DefaultDefragRemovalSets).
	MaxRemovalSets int
	// Destinations, when set, restricts where each moved slice may be re-created (nil: any
	// usable GPU of its model).
	Destinations DestinationFunc
	// Chains also looks, when no plan of one or two moves exists and MaxMoves allows two, for a
	// two-move chain (defrag_chain.go): an Ordered plan whose second move goes into the room the
	// first one leaves. Ignored with Destinations.
	Chains bool
}

// DestinationFunc says where the slice at from, once moved, may be re-created: a predicate over
// node indexes of PlanDefrag's nodes, or nil when any node will do. It is asked once per slice
// the planner considers moving; the predicate may be asked several times for one node (it
// should remember its answers). Both must be deterministic for the duration of one PlanDefrag
// call. (A moved slice's constraints are its
// pod's, which are a node's: node selector and affinity, taints, schedulability.)
type DestinationFunc func(from SliceAt) func(node int) bool

// MovableFunc reports whether the slice of profile p at placement pl on GPU gpu of node node may
// be moved. It must be deterministic for the duration of one PlanDefrag call.
type MovableFunc func(node, gpu int, p Profile, pl Placement) bool

// SliceAt is one slice of the cluster: node and GPU indexes into PlanDefrag's nodes, the
// profile and the placement.
type SliceAt struct {
	Node      int
	GPU       int
	Profile   Profile
	Placement Placement
}

// Move destroys the slice at From and re-creates it at To.
type Move struct {
	From SliceAt
	To   SliceAt
}

// DefragPlan is a plan of moves and where the pending request goes once they are done.
type DefragPlan struct {
	Moves  []Move
	Target SliceAt
	// Ordered: each move's destination is free only once the slices of the moves before it are
	// gone (a chain, DefragOptions.Chains); otherwise every destination is free now.
	Ordered bool
}

// DefragOutcome says what the planner found.
type DefragOutcome string

const (
	// DefragPlanned: the plan opens a legal placement for the request.
	DefragPlanned DefragOutcome = "Planned"
	// DefragFitsNow: the request fits without moves.
	DefragFitsNow DefragOutcome = "FitsNow"
	// DefragNoCapacity: no GPU model that has the profile has enough free compute and memory
	// slices in total; no move can help.
	DefragNoCapacity DefragOutcome = "NoCapacity"
	// DefragNoPlan: no plan within MaxMoves moves (or within the work bound, see Bounded).
	DefragNoPlan DefragOutcome = "NoPlan"
	// DefragUnsupported: the request asks for more than one slice.
	DefragUnsupported DefragOutcome = "Unsupported"
)

// DefragResult is PlanDefrag's answer.
type DefragResult struct {
	Outcome DefragOutcome
	Plan    DefragPlan
	// Bounded is true when the work bound stopped the search before it was exhaustive. A plan
	// still has the fewest moves (every smaller count was searched in full; only the
	// tie-break saw fewer candidates); DefragNoPlan is then no proof that none exists.
	Bounded bool
	// RemovalSets is how many (GPU, removal set) pairs were examined.
	RemovalSets int
}

// PlanDefrag finds the fewest moves (up to opt.MaxMoves) of slices that movable allows after
// which the single-slice request has a legal placement. It is exact while fewer than
// opt.MaxRemovalSets removal sets are examined.
//
// Search: for k = 1, 2, ... it looks at every usable GPU whose fewest removals for the profile
// (a table lookup that ignores movability) is at most k and which the removal of all its
// movable slices would open, in node then GPU order; at each set of k of its movable slices
// whose removal makes the profile fit; at each legal placement of the profile there. A set is feasible when its slices can all be re-created elsewhere:
// exactly decided by trying every destination of the slices whose profile fits on fewer than k
// other GPUs (there are few), the others then always finding an untouched GPU. Among the first
// 16 feasible candidates with k moves it takes the one moving the fewest compute slices, then
// the one whose request placement loses the least future placeability on the target GPU, then
// the first found; slices moved to untouched GPUs go to the one of best fit (Slicer policy).
func PlanDefrag(nodes []Node, req *Request, movable MovableFunc, opt DefragOptions) DefragResult {
	if req == nil || req.n != 1 {
		return DefragResult{Outcome: DefragUnsupported}
	}
	maxMoves := opt.MaxMoves
	if maxMoves <= 0 {
		maxMoves = DefaultDefragMoves
	}
	maxMoves = min(maxMoves, MaxDefragMoves)
	budget := opt.MaxRemovalSets
	if budget <= 0 {
		budget = DefaultDefragRemovalSets
	}
	r := defragRun{nodes: nodes, req: req, movable: movable, dest: opt.Destinations, maxMoves: maxMoves}
	if out := r.survey(); out != "" {
		return DefragResult{Outcome: out}
	}
	res := DefragResult{Outcome: DefragNoPlan}
	for k := 1; k <= maxMoves; k++ {
		r.k = k
		r.best = defragCandidate{}
		r.ties = 0
		r.scan(budget - res.RemovalSets)
		res.RemovalSets += r.examined
		if r.best.found {
			res.Outcome = DefragPlanned
			res.Plan = r.materialize(r.best)
			res.Bounded = r.stopped
			return res
		}
		if r.stopped {
			res.Bounded = true
			break
		}
		if k == 2 && opt.Chains && r.dest == nil {
			if plan, ok := r.chain(); ok {
				res.Outcome, res.Plan = DefragPlanned, plan
				return res
			}
		}
	}
	return res
}

type gpuRef struct{ node, gpu int32 }

type defragCandidate struct {
	found     bool
	node, gpu int
	gi        int    // the target GPU's index in node then GPU order
	sub       uint32 // slots of the target GPU's state to move
	slot      int    // the request's slot on the target GPU
	compute   int    // compute slices moved
	cost      int32  // V lost by the request's placement on the target GPU
}

type defragRun struct {
	nodes   []Node
	req     *Request
	movable MovableFunc
	dest    DestinationFunc

	maxMoves int
	// dests caches, per moved slice (GPU index in node then GPU order × 32 + slot), where it
	// may go; only with dest set.
	dests map[int]*destInfo
	// hosts caches chainHosts per (model, profile).
	hosts map[[2]int][]chainHost

	present  [numModels + 1]bool
	hist     [numModels + 1][]int32               // usable GPUs per state index
	fitCount [numModels + 1][maxProfiles]int      // usable GPUs where the profile fits now
	fitList  [numModels + 1][maxProfiles][]gpuRef // those GPUs, built only for scarce profiles
	fitBuilt [numModels + 1][maxProfiles]bool
	movCache []uint32 // per GPU in node then GPU order, see movableSlots

	k        int
	examined int
	stopped  bool
	best     defragCandidate
	ties     int

	// scratch of feasible()
	moved   [MaxDefragMoves]int // slot indexes being moved
	scarce  [MaxDefragMoves]int
	overlay [MaxDefragMoves + 1]struct {
		ref gpuRef
		idx uint16
	}
	nover  int
	choice [MaxDefragMoves]SliceAt
	info   [MaxDefragMoves]*destInfo // per moved slot: its restriction, nil when none
}

// destInfo is where one moved slice may go under DefragOptions.Destinations.
type destInfo struct {
	allow func(node int) bool
	// target: the slice may be re-created on its own GPU's node (the request's target GPU).
	target bool
	// others counts the allowed GPUs other than its own where its profile fits now, up to
	// maxMoves; list holds them all when others < maxMoves.
	others int
	list   []gpuRef
}

// survey counts the usable GPUs per state and answers the cheap outcomes.
func (r *defragRun) survey() DefragOutcome {
	var tabs [numModels + 1]*modelTable
	var want [numModels + 1]int
	ngpus := 0
	for n := range r.nodes {
		gpus := r.nodes[n].GPUs
		ngpus += len(gpus)
		for i := range gpus {
			g := &gpus[i]
			m := g.State.model
			if !g.Usable || m == 0 || m > numModels {
				continue
			}
			t := tabs[m]
			if t == nil {
				t = tableFor(m)
				tabs[m] = t
				r.present[m] = true
				r.hist[m] = make([]int32, len(t.states))
				want[m] = int(r.req.prof[m][0])
			}
			idx := int(g.State.idx)
			r.hist[m][idx]++
			if p := want[m]; p >= 0 && t.nvmlSlot[idx*t.nprof()+p] != noSlot {
				return DefragFitsNow
			}
		}
	}
	room := false
	for m := Model(1); m <= numModels; m++ {
		t := tabs[m]
		if t == nil {
			continue
		}
		np := t.nprof()
		freeC, freeM := 0, 0
		for st, c := range r.hist[m] {
			if c == 0 {
				continue
			}
			freeC += int(c) * (t.spec.computeSlices - int(t.compute[st]))
			freeM += int(c) * (t.spec.memorySlices - bits.OnesCount16(t.used[st]))
			for q := 0; q < np; q++ {
				if t.nvmlSlot[st*np+q] != noSlot {
					r.fitCount[m][q] += int(c)
				}
			}
		}
		if p := want[m]; p >= 0 && freeC >= t.spec.profiles[p].compute && freeM >= t.spec.profiles[p].memory {
			room = true
		}
	}
	if !room {
		return DefragNoCapacity
	}
	r.movCache = make([]uint32, ngpus)
	return ""
}

// scan examines level r.k: every GPU that k removals may open, every k-set of its movable
// slices, every placement of the request they open.
func (r *defragRun) scan(budget int) {
	r.examined, r.stopped = 0, false
	var tabs [numModels + 1]*modelTable
	var dts [numModels + 1]*defragTable
	for m := Model(1); m <= numModels; m++ {
		if r.present[m] && r.req.prof[m][0] >= 0 {
			tabs[m], dts[m] = tableFor(m), defragTableFor(m)
		}
	}
	gi := -1
	for n := range r.nodes {
		for g := range r.nodes[n].GPUs {
			gi++
			gpu := &r.nodes[n].GPUs[g]
			m := gpu.State.model
			if !gpu.Usable || m == 0 || m > numModels || tabs[m] == nil {
				continue
			}
			p := int(r.req.prof[m][0])
			t := tabs[m]
			st := int(gpu.State.idx)
			if int(dts[m].minRemovals[st*t.nprof()+p]) > r.k {
				continue
			}
			mov := r.movableSlots(gi, n, g, t, dts[m], st, p)
			if mov&movHopeless != 0 || bits.OnesCount32(mov&^movKnown) < r.k {
				continue
			}
			var pos [32]int
			npos := 0
			for mask := mov &^ movKnown; mask != 0; mask &= mask - 1 {
				pos[npos] = bits.TrailingZeros32(mask)
				npos++
			}
			// Every k-subset of the npos movable slots, as a bitmask over pos (Gosper's hack).
			for c := uint32(1)<<r.k - 1; c < 1<<npos; {
				if r.examined >= budget {
					r.stopped = true
					return
				}
				r.examined++
				if r.tryRemoval(gi, n, g, t, st, p, c, pos[:npos]) {
					return
				}
				low := c & -c
				ripple := c + low
				c = (((ripple ^ c) >> 2) / low) | ripple
			}
		}
	}
}

const (
	movKnown    = 1 << 30 // movCache entry computed
	movHopeless = 1 << 31 // the profile does not fit even with every movable slice gone
)

// movableSlots is the slot mask of GPU gi's movable instances, asked of the callback once per
// call and kept in r.movCache, with movHopeless set when removing all of them would not open
// the profile.
func (r *defragRun) movableSlots(gi, n, g int, t *modelTable, dt *defragTable, st, p int) uint32 {
	if e := r.movCache[gi]; e&movKnown != 0 {
		return e
	}
	mask := t.states[st]
	var mov uint32
	if r.movable != nil {
		for rest := mask; rest != 0; rest &= rest - 1 {
			s := bits.TrailingZeros32(rest)
			sl := t.slots[s]
			if r.movable(n, g, t.profiles[sl.prof], Placement{Start: int(sl.start), Size: int(sl.size)}) {
				mov |= 1 << s
			}
		}
	}
	e := mov | movKnown
	switch {
	case mov == 0: // the GPU as it is, which does not fit the profile
		e |= movHopeless
	case mov != mask: // mov == mask: the empty GPU fits every profile
		if fixed := dt.index[mask&^mov]; t.nvmlSlot[int(fixed)*t.nprof()+p] == noSlot {
			e |= movHopeless
		}
	}
	r.movCache[gi] = e
	return e
}

// tryRemoval checks one removal set (c over pos) on GPU (n, g). It returns true when enough
// feasible candidates were seen at this level.
func (r *defragRun) tryRemoval(gi, n, g int, t *modelTable, st, p int, c uint32, pos []int) bool {
	ns, np := t.nslots(), t.nprof()
	var sub uint32
	cur := st
	compute := 0
	var forbid uint16
	k := 0
	for rest := c; rest != 0; rest &= rest - 1 {
		s := pos[bits.TrailingZeros32(rest)]
		sub |= 1 << s
		cur = int(t.release[cur*ns+s])
		compute += t.spec.profiles[t.slots[s].prof].compute
		forbid |= t.slots[s].mem
		r.moved[k] = s
		k++
	}
	if t.nvmlSlot[cur*np+p] == noSlot {
		return false
	}
	for _, start := range t.profiles[p].Starts {
		slot := int(t.slotOf[p][start])
		next := t.take[cur*ns+slot]
		if next == noState {
			continue
		}
		cost := t.value[cur] - t.value[next]
		cand := defragCandidate{found: true, node: n, gpu: g, gi: gi, sub: sub, slot: slot, compute: compute, cost: cost}
		if !r.feasible(gi, n, g, t, st, uint16(next), forbid, false) {
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

// feasible decides whether the r.k slots in r.moved (of GPU (n, g), whose state after the
// removals and the request's placement is after) can all be re-created at placements free now:
// not overlapping forbid on the target GPU (gi in node then GPU order), and on GPUs its
// restriction allows. With record it fills r.choice for the scarce slices and r.overlay with
// the GPUs they touch.
//
// A slice whose profile fits now on at least k allowed GPUs other than the target always finds
// an untouched one (the other k-1 slices touch at most k-1 GPUs besides the target), so only
// the others, the scarce ones, are placed by search.
func (r *defragRun) feasible(gi, n, g int, t *modelTable, st int, after uint16, forbid uint16, record bool) bool {
	m := r.nodes[n].GPUs[g].State.model
	np := t.nprof()
	nscarce := 0
	for i := 0; i < r.k; i++ {
		q := int(t.slots[r.moved[i]].prof)
		var others int
		r.info[i] = nil
		if r.dest != nil {
			r.info[i] = r.destOf(gi, n, g, t, r.moved[i])
		}
		if in := r.info[i]; in != nil {
			others = in.others
		} else {
			others = r.fitCount[m][q]
			if t.nvmlSlot[st*np+q] != noSlot {
				others-- // the target GPU itself is no "other" GPU
			}
		}
		if others < r.k {
			r.scarce[nscarce] = i
			nscarce++
		}
	}
	r.nover = 1
	r.overlay[0].ref, r.overlay[0].idx = gpuRef{int32(n), int32(g)}, after
	if nscarce == 0 {
		return true
	}
	return r.place(m, t, n, g, forbid, nscarce, 0, record)
}

// place tries every destination of scarce slice i and the ones after it (backtracking).
func (r *defragRun) place(m Model, t *modelTable, n, g int, forbid uint16, nscarce, i int, record bool) bool {
	if i == nscarce {
		return true
	}
	mi := r.scarce[i]
	q := int(t.slots[r.moved[mi]].prof)
	target := gpuRef{int32(n), int32(g)}
	in := r.info[mi]
	var refs []gpuRef
	if in != nil {
		refs = in.list // complete: a restricted slice is scarce only when others < k <= maxMoves
	} else {
		refs = r.fits(m, q)
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
			if r.place(m, t, n, g, forbid, nscarce, i+1, record) {
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

// fits lists the usable GPUs of model m where profile q fits now. It is built on first use:
// for scarce profiles (fewer than MaxDefragMoves such GPUs) and for restricted slices (destOf).
func (r *defragRun) fits(m Model, q int) []gpuRef {
	if r.fitBuilt[m][q] {
		return r.fitList[m][q]
	}
	r.fitBuilt[m][q] = true
	t := tableFor(m)
	var out []gpuRef
scan:
	for n := range r.nodes {
		for g, gpu := range r.nodes[n].GPUs {
			if gpu.Usable && gpu.State.model == m && t.nvmlSlot[int(gpu.State.idx)*t.nprof()+q] != noSlot {
				out = append(out, gpuRef{int32(n), int32(g)})
				if len(out) == r.fitCount[m][q] {
					break scan
				}
			}
		}
	}
	r.fitList[m][q] = out
	return out
}

// destOf is where the slot s of GPU (n, g) (gi in node then GPU order) may go under r.dest,
// nil when anywhere. Computed once per slice and call: the allowed GPUs where its profile fits
// now are counted up to maxMoves (the most a plentiful slice needs), listed in full below that.
func (r *defragRun) destOf(gi, n, g int, t *modelTable, s int) *destInfo {
	key := gi*32 + s
	if in, ok := r.dests[key]; ok {
		return in
	}
	if r.dests == nil {
		r.dests = map[int]*destInfo{}
	}
	sl := t.slots[s]
	from := SliceAt{Node: n, GPU: g, Profile: t.profiles[sl.prof], Placement: Placement{Start: int(sl.start), Size: int(sl.size)}}
	allow := r.dest(from)
	if allow == nil {
		r.dests[key] = nil
		return nil
	}
	in := &destInfo{allow: allow, target: allow(n)}
	self := gpuRef{int32(n), int32(g)}
	last, lastOK := int32(-1), false
	for _, ref := range r.fits(r.nodes[n].GPUs[g].State.model, int(sl.prof)) {
		if ref == self {
			continue
		}
		if ref.node != last {
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
	gpu := r.nodes[c.node].GPUs[c.gpu]
	m := gpu.State.model
	t := tableFor(m)
	ns := t.nslots()
	st := int(gpu.State.idx)
	cur := st
	var forbid uint16
	k := 0
	for rest := c.sub; rest != 0; rest &= rest - 1 {
		s := bits.TrailingZeros32(rest)
		cur = int(t.release[cur*ns+s])
		forbid |= t.slots[s].mem
		r.moved[k] = s
		k++
	}
	r.k = k
	after := uint16(t.take[cur*ns+c.slot])
	for i := range r.choice {
		r.choice[i] = SliceAt{Node: -1}
	}
	r.feasible(c.gi, c.node, c.gpu, t, st, after, forbid, true)
	plan := DefragPlan{Moves: make([]Move, k)}
	for i := 0; i < k; i++ {
		sl := t.slots[r.moved[i]]
		from := SliceAt{Node: c.node, GPU: c.gpu, Profile: t.profiles[sl.prof],
			Placement: Placement{Start: int(sl.start), Size: int(sl.size)}}
		to := r.choice[i]
		if to.Node < 0 {
			var allow func(int) bool
			if r.info[i] != nil {
				allow = r.info[i].allow
			}
			to = r.bestUntouched(m, int(sl.prof), allow)
		}
		plan.Moves[i] = Move{From: from, To: to}
	}
	ts := t.slots[c.slot]
	plan.Target = SliceAt{Node: c.node, GPU: c.gpu, Profile: t.profiles[ts.prof],
		Placement: Placement{Start: int(ts.start), Size: int(ts.size)}}
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
			if !gpu.Usable || gpu.State.model != m {
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
	// best.node >= 0 always: a plentiful slice fits on more untouched GPUs than there are
	// touched ones (see feasible).
	idx := int(r.nodes[best.node].GPUs[best.gpu].State.idx)
	slot := int(t.best[idx*np+q])
	r.overlay[r.nover].ref, r.overlay[r.nover].idx = best, uint16(t.take[idx*t.nslots()+slot])
	r.nover++
	sl := t.slots[slot]
	return SliceAt{Node: int(best.node), GPU: int(best.gpu), Profile: t.profiles[q],
		Placement: Placement{Start: int(sl.start), Size: int(sl.size)}}
}
