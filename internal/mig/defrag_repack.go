package mig

import (
	"math/bits"
	"slices"
)

// Repack plans (PlanRepack): when no plan of a few independent moves opens a placement for a
// pending single-slice request, re-place the running slices of a few GPUs of one model,
// together with the request, from scratch on those same GPUs. PackExact decides whether they fit
// there at all, whatever the GPUs hold now; the layout found is laid on the GPUs so as to keep
// as many slices where they are as possible, and every other slice of those GPUs moves. A moved
// slice may land where another moved slice is now, so a repack plan is Ordered: every moved
// slice is gone before any is re-created (docs/design/defragmentation.md, Repack plans).

// DefaultRepackGPUs is how many GPUs a repack plan re-places together unless told otherwise;
// DefaultRepackWork bounds PackExact's search for one set of GPUs.
const (
	DefaultRepackGPUs = 4
	DefaultRepackWork = 1 << 16
)

// maxMatchedGPUs is the most GPUs whose layout is matched to the cluster's by trying every
// permutation (4! = 24); above it the match is greedy.
const maxMatchedGPUs = 4

// RepackOptions bounds PlanRepack.
type RepackOptions struct {
	// MaxGPUs is the most GPUs one plan re-places (at least 2); 0 means DefaultRepackGPUs.
	MaxGPUs int
	// MaxMoves is the most slices one plan moves; 0 means no bound. A set whose plan would
	// move more is passed over.
	MaxMoves int
	// Destinations, when set, restricts the nodes each moved slice may go to, as
	// DefragOptions.Destinations.
	Destinations DestinationFunc
	// Work bounds PackExact for one set of GPUs; 0 means DefaultRepackWork.
	Work int
}

// PlanRepack finds a repack plan for the single-slice request. For k = 2 up to opt.MaxGPUs it
// tries sets of k usable GPUs of one model (models in their table order), drawn from the
// roomiest: the k with the most free compute slices (ties: free memory slices, then node and
// GPU order), the k with the most free memory slices (ties: compute), the two lists taken in
// turn, and the same three from the roomiest GPUs whose every slice movable allows; the first
// k for which a set fits the request with the running slices of its GPUs gives the plan, the
// set whose plan moves the fewest slices (the first of equals). A plan never moves a slice
// movable refuses (a layout that would is passed over) nor more than opt.MaxMoves. Outcomes as
// PlanDefrag's; Bounded when some set's search ran out of work.
func PlanRepack(nodes []Node, req *Request, movable MovableFunc, opt RepackOptions) DefragResult {
	if req == nil || req.n != 1 {
		return DefragResult{Outcome: DefragUnsupported}
	}
	maxGPUs := opt.MaxGPUs
	if maxGPUs <= 0 {
		maxGPUs = DefaultRepackGPUs
	}
	maxGPUs = max(maxGPUs, 2)
	work := opt.Work
	if work <= 0 {
		work = DefaultRepackWork
	}
	// One pass: per model offering the profile, its free compute and memory slices and its
	// roomiest GPUs by either key (table lookups only).
	type perModel struct {
		seen                bool
		gpus, freeC, freeM  int
		byCompute, byMemory topGPUs
	}
	var per [numModels + 1]perModel
	for n := range nodes {
		for g := range nodes[n].GPUs {
			gpu := &nodes[n].GPUs[g]
			m := gpu.State.model
			if !gpu.slicesNow() || m == 0 || m > numModels || req.prof[m][0] < 0 {
				continue
			}
			t := tableFor(m)
			idx := int(gpu.State.idx)
			if t.nvmlSlot[idx*t.nprof()+int(req.prof[m][0])] != noSlot {
				return DefragResult{Outcome: DefragFitsNow}
			}
			pm := &per[m]
			if !pm.seen {
				pm.seen = true
				pm.byCompute, pm.byMemory = topGPUs{n: repackCandidates * maxGPUs}, topGPUs{n: repackCandidates * maxGPUs}
			}
			c := t.spec.computeSlices - int(t.compute[idx])
			mem := t.spec.memorySlices - bits.OnesCount16(t.used[idx])
			pm.gpus++
			pm.freeC += c
			pm.freeM += mem
			at := SliceAt{Node: n, GPU: g}
			pm.byCompute.offer(at, c<<8|mem)
			pm.byMemory.offer(at, mem<<8|c)
		}
	}
	res := DefragResult{Outcome: DefragNoCapacity}
	for m := Model(1); m <= numModels; m++ {
		pm := &per[m]
		if !pm.seen {
			continue
		}
		t := tableFor(m)
		p := t.profiles[req.prof[m][0]]
		if pm.freeC < p.ComputeSlices || pm.freeM < p.MemorySlices {
			continue
		}
		if res.Outcome == DefragNoCapacity {
			res.Outcome = DefragNoPlan
		}
		r := repackRun{nodes: nodes, movable: movable, model: m, profile: p, work: work, maxMoves: opt.MaxMoves, dest: opt.Destinations}
		byCompute, byMemory := pm.byCompute.at, pm.byMemory.at
		allC, allM := r.allMovable(byCompute), r.allMovable(byMemory)
		for k := 2; k <= min(maxGPUs, pm.gpus); k++ {
			var best DefragPlan
			ok := false
			for _, set := range repackSets(k, byCompute, byMemory, allC, allM) {
				if other, found := r.plan(set); found && (!ok || len(other.Moves) < len(best.Moves)) {
					best, ok = other, true
				}
			}
			if ok {
				res.Outcome, res.Plan, res.Bounded = DefragPlanned, best, r.bounded
				return res
			}
		}
		res.Bounded = res.Bounded || r.bounded
	}
	return res
}

// repackCandidates × the most GPUs of a set is how many of the roomiest GPUs PlanRepack draws
// its sets from, by either key.
const repackCandidates = 3

// repackSets lists PlanRepack's sets of k GPUs, each once: the first k of byCompute, of
// byMemory and of the two in turn, then the same of their GPUs whose every slice may move.
func repackSets(k int, byCompute, byMemory, allC, allM []SliceAt) [][]SliceAt {
	var sets [][]SliceAt
	add := func(set []SliceAt) {
		if len(set) < k {
			return
		}
		set = set[:k]
		for _, o := range sets {
			if sameGPUs(o, set) {
				return
			}
		}
		sets = append(sets, set)
	}
	for _, l := range [][2][]SliceAt{{byCompute, byMemory}, {allC, allM}} {
		add(l[0])
		add(l[1])
		add(inTurn(l[0], l[1], k))
	}
	return sets
}

// inTurn is the first k distinct GPUs of a and b taken in turn.
func inTurn(a, b []SliceAt, k int) []SliceAt {
	var out []SliceAt
	for i := 0; len(out) < k && (i < len(a) || i < len(b)); i++ {
		for _, l := range [][]SliceAt{a, b} {
			if i < len(l) && len(out) < k && !slices.ContainsFunc(out, func(h SliceAt) bool { return h.Node == l[i].Node && h.GPU == l[i].GPU }) {
				out = append(out, l[i])
			}
		}
	}
	return out
}

// topGPUs keeps the n GPUs of the highest keys offered, in key order, the earlier offered first
// among equal keys.
type topGPUs struct {
	n    int
	at   []SliceAt
	keys []int
}

func (t *topGPUs) offer(at SliceAt, key int) {
	if len(t.at) == t.n && key <= t.keys[t.n-1] {
		return
	}
	i := len(t.at)
	for i > 0 && t.keys[i-1] < key {
		i--
	}
	t.at, t.keys = slices.Insert(t.at, i, at), slices.Insert(t.keys, i, key)
	if len(t.at) > t.n {
		t.at, t.keys = t.at[:t.n], t.keys[:t.n]
	}
}

func sameGPUs(a, b []SliceAt) bool {
	if len(a) != len(b) {
		return false
	}
	for _, g := range a {
		if !slices.ContainsFunc(b, func(h SliceAt) bool { return h.Node == g.Node && h.GPU == g.GPU }) {
			return false
		}
	}
	return true
}

type repackRun struct {
	nodes    []Node
	movable  MovableFunc
	model    Model
	profile  Profile
	work     int
	maxMoves int
	dest     DestinationFunc
	destMemo map[[3]int]func(int) bool
	whole    map[[2]int]bool // allMovable's answers per (node, GPU)
	bounded  bool
}

// allMovable keeps the GPUs of list whose every slice movable allows, asking it once per GPU
// and call.
func (r *repackRun) allMovable(list []SliceAt) []SliceAt {
	if r.whole == nil {
		r.whole = map[[2]int]bool{}
	}
	var out []SliceAt
	for _, g := range list {
		key := [2]int{g.Node, g.GPU}
		ok, seen := r.whole[key]
		if !seen {
			ok = true
			for _, in := range r.nodes[g.Node].GPUs[g.GPU].State.Instances() {
				if !r.movable(g.Node, g.GPU, stateProfile(r.model, in.Profile), in.Placement) {
					ok = false
					break
				}
			}
			r.whole[key] = ok
		}
		if ok {
			out = append(out, g)
		}
	}
	return out
}

// allowed is where the slice at from may go (r.dest asked once per slice, its predicate once
// per node, as DestinationFunc promises).
func (r *repackRun) allowed(from SliceAt) func(int) bool {
	if r.dest == nil {
		return func(int) bool { return true }
	}
	key := [3]int{from.Node, from.GPU, from.Placement.Start}
	if f, ok := r.destMemo[key]; ok {
		return f
	}
	f := r.dest(from)
	if f == nil {
		f = func(int) bool { return true }
	} else {
		f = onceEach(f)
	}
	if r.destMemo == nil {
		r.destMemo = map[[3]int]func(int) bool{}
	}
	r.destMemo[key] = f
	return f
}

// plan re-places the slices of set with the request; ok false when they do not fit there, or
// every way of laying the layout found on set would move a slice movable refuses.
//
// The layout is a count per profile for each GPU. Each GPU of set takes one of them (every
// permutation is tried up to maxMatchedGPUs GPUs, a greedy match above), and, among the legal
// states with those counts, the one that keeps most of its slices where they are and every slice
// movable refuses; the match keeping the most slices wins.
func (r *repackRun) plan(set []SliceAt) (DefragPlan, bool) {
	t := tableFor(r.model)
	counts := map[string]int{r.profile.Name: 1}
	current := make([][]Instance, len(set))
	for i, g := range set {
		current[i] = r.nodes[g.Node].GPUs[g.GPU].State.Instances()
		for _, in := range current[i] {
			counts[in.Profile]++
		}
	}
	items := make([]RequestItem, 0, len(counts))
	for _, p := range t.profiles {
		if n := counts[p.Name]; n > 0 {
			items = append(items, RequestItem{Profile: p.Name, Count: n})
		}
	}
	_, layout, answer, err := packCounts(r.model, items, len(set), r.work)
	if answer == packOutOfWork {
		r.bounded = true
	}
	if err != nil || answer != packYes {
		return DefragPlan{}, false
	}
	for len(layout) < len(set) {
		layout = append(layout, [maxProfiles]uint8{})
	}
	// fixed[i][j]: current[i][j] may not move (movable is asked once per slice of the set).
	fixed := make([][]bool, len(set))
	for i, g := range set {
		fixed[i] = make([]bool, len(current[i]))
		for j, in := range current[i] {
			fixed[i][j] = !r.movable(g.Node, g.GPU, stateProfile(r.model, in.Profile), in.Placement)
		}
	}
	byCounts := t.statesByCounts()
	type choice struct {
		state GPUState
		kept  int // -1: no state with these counts keeps every fixed slice
	}
	choices := make([][]choice, len(set))
	for i := range set {
		choices[i] = make([]choice, len(layout))
		for c, want := range layout {
			best := choice{kept: -1}
			for _, idx := range byCounts[want] {
				st := GPUState{model: r.model, idx: uint16(idx)}
				n := 0
				for j, in := range current[i] {
					if st.Has(stateProfile(r.model, in.Profile), in.Placement) {
						n++
					} else if fixed[i][j] {
						n = -1
						break
					}
				}
				if n > best.kept {
					best = choice{st, n}
				}
			}
			choices[i][c] = best
		}
	}
	bestKept, bestPerm := -1, []int(nil)
	try := func(perm []int) {
		n := 0
		for i, c := range perm {
			if choices[i][c].kept < 0 {
				return
			}
			n += choices[i][c].kept
		}
		if n > bestKept {
			bestKept, bestPerm = n, slices.Clone(perm)
		}
	}
	if len(set) <= maxMatchedGPUs {
		permutations(len(set), try)
	} else {
		try(greedyMatch(choices, func(c choice) int { return c.kept }))
	}
	if bestPerm == nil {
		return DefragPlan{}, false
	}
	// The new states' instances that no slice keeps are open. Moved slices take them in set
	// order, those free now first, so that the request, which takes the last one of its
	// profile, gets the room the moves open and the moves' destinations are free now when they
	// can be (then the plan is not Ordered).
	type open struct {
		gpu  int
		in   Instance
		free bool
	}
	opens := map[string][]open{}
	for i, c := range bestPerm {
		now := r.nodes[set[i].Node].GPUs[set[i].GPU].State
		for _, in := range choices[i][c].state.Instances() {
			if !slices.Contains(current[i], in) {
				opens[in.Profile] = append(opens[in.Profile], open{i, in, now.CanTake(stateProfile(r.model, in.Profile), in.Placement)})
			}
		}
	}
	for _, os := range opens {
		slices.SortStableFunc(os, func(a, b open) int {
			switch {
			case a.free == b.free:
				return 0
			case a.free:
				return -1
			}
			return 1
		})
	}
	at := func(i int, in Instance) SliceAt {
		return SliceAt{Node: set[i].Node, GPU: set[i].GPU, Profile: stateProfile(r.model, in.Profile), Placement: in.Placement}
	}
	plan := DefragPlan{Repack: true}
	for i, c := range bestPerm {
		st := choices[i][c].state
		for _, in := range current[i] {
			if st.Has(stateProfile(r.model, in.Profile), in.Placement) {
				continue
			}
			from := at(i, in)
			allow := r.allowed(from)
			// The request takes the last open instance of its profile: keep it for the request.
			avail := opens[in.Profile]
			if in.Profile == r.profile.Name {
				avail = avail[:len(avail)-1]
			}
			k := slices.IndexFunc(avail, func(o open) bool { return allow(set[o.gpu].Node) })
			if k < 0 {
				return DefragPlan{}, false // no destination its node filters admit
			}
			o := avail[k]
			opens[in.Profile] = slices.Delete(opens[in.Profile], k, k+1)
			plan.Moves = append(plan.Moves, Move{From: from, To: at(o.gpu, o.in)})
		}
	}
	if r.maxMoves > 0 && len(plan.Moves) > r.maxMoves {
		return DefragPlan{}, false
	}
	last := opens[r.profile.Name]
	plan.Target = at(last[len(last)-1].gpu, last[len(last)-1].in)
	// Ordered unless every destination can be taken now, one after the other, with every
	// moved slice still in place (as Evict holds them before it evicts).
	held := make([]GPUState, len(set))
	for i, g := range set {
		held[i] = r.nodes[g.Node].GPUs[g.GPU].State
	}
	for _, mv := range plan.Moves {
		i := slices.IndexFunc(set, func(g SliceAt) bool { return g.Node == mv.To.Node && g.GPU == mv.To.GPU })
		next, err := held[i].Take(mv.To.Profile, mv.To.Placement)
		if err != nil {
			plan.Ordered = true
			break
		}
		held[i] = next
	}
	return plan, true
}

// stateProfile is the profile of an instance of a state of model m (always known: the name
// comes from the model's own table).
func stateProfile(m Model, name string) Profile {
	p, _ := m.Profile(name)
	return p
}

// permutations calls f with every permutation of 0..n-1 (Heap's algorithm; f must not keep
// the slice).
func permutations(n int, f func([]int)) {
	a := make([]int, n)
	for i := range a {
		a[i] = i
	}
	c := make([]int, n)
	f(a)
	for i := 0; i < n; {
		if c[i] < i {
			if i%2 == 0 {
				a[0], a[i] = a[i], a[0]
			} else {
				a[c[i]], a[i] = a[i], a[c[i]]
			}
			f(a)
			c[i]++
			i = 0
		} else {
			c[i] = 0
			i++
		}
	}
}

// greedyMatch gives each GPU (row of choices) a layout GPU (column), the pairs of most value
// first; a pair of negative value is never taken unless nothing else is left.
func greedyMatch[C any](choices [][]C, value func(C) int) []int {
	type pair struct{ gpu, col, value int }
	var pairs []pair
	for i, row := range choices {
		for c, ch := range row {
			pairs = append(pairs, pair{i, c, value(ch)})
		}
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return b.value - a.value })
	perm := make([]int, len(choices))
	for i := range perm {
		perm[i] = -1
	}
	used := make([]bool, len(choices))
	for _, p := range pairs {
		if perm[p.gpu] < 0 && !used[p.col] {
			perm[p.gpu], used[p.col] = p.col, true
		}
	}
	return perm
}
