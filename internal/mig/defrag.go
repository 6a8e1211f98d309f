package mig

import "math/bits"

// Defragmentation planning: a pending single-slice request fits the cluster's free compute and
// memory but no legal placement is left. PlanDefrag finds the fewest moves of movable slices,
// each re-created at a placement that is free now (so that every room of a plan can be held
// before anything is evicted), after which a legal placement is open for the request; such a
// plan moves slices off one GPU only (docs/design/defragmentation.md, Planner).

// MaxDefragMoves is the most moves one plan may have.
const MaxDefragMoves = 4

// DefaultDefragMoves is the move bound when DefragOptions.MaxMoves is zero, and the API's
// default maxMovesPerPlan (api/v1alpha1's test pins the two together).
const DefaultDefragMoves = 4

// DefaultDefragRemovalSets is the work bound when DefragOptions.MaxRemovalSets is zero.
const DefaultDefragRemovalSets = 1 << 15

// ShallowDefragMoves is the most moves of the shallow search, always searched to the end
// (within MaxRemovalSets); the levels above it are the deeper search, bounded by DeepWork.
const ShallowDefragMoves = 2

// DefaultDefragDeepWork is the deeper search's work bound when DefragOptions.DeepWork is zero:
// on a cluster of fewer GPUs it is exact (docs/benchmarks.md has its cost and its misses at
// 5,000 nodes × 8 GPUs).
const DefaultDefragDeepWork = 4096

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
	// DeepWork bounds the deeper search, the plans of more than ShallowDefragMoves moves,
	// which runs only once the shallow search and the repack plans found nothing: how many
	// GPUs its levels may look at, together, past the table test of their state (0:
	// DefaultDefragDeepWork; negative: no bound). When it runs out the result is Bounded.
	DeepWork int
	// Destinations, when set, restricts where each moved slice may be re-created (nil: any
	// usable GPU of its model).
	Destinations DestinationFunc
	// DestinationClass, with Destinations, names each moved slice's class: the slices of one
	// positive class may go to the same nodes (their pods pass the same node filters), so
	// Destinations is asked once per class and a class's allowed GPUs are counted once per
	// profile, not once per slice (defrag_class.go). 0 (or less): a class of its own. The
	// caller numbers its classes, best from 1 up: the planner keeps small numbers in a slice
	// (a number is found without hashing), large ones in a map. It changes no answer when the
	// classes are true.
	DestinationClass func(from SliceAt) int
	// RepackGPUs, when positive, also looks for a repack plan over at most that many GPUs
	// (PlanRepack, within MaxMoves and Destinations) once no plan of at most two independent
	// moves exists, before plans of three or more (defrag_repack.go). 0: no repack plans.
	RepackGPUs int
}

// DestinationFunc says where the slice at from, once moved, may be re-created: a predicate over
// node indexes of PlanDefrag's nodes, or nil when any node will do. It is asked once per slice
// the planner considers moving (once per class with DefragOptions.DestinationClass), and once
// more per slice a repack search (DefragOptions.RepackGPUs) considers; each predicate is asked
// at most once per node (the planner remembers its answers, so the caller need not). Both must
// be deterministic for the duration of one PlanDefrag call. (A moved
// slice's constraints are its pod's, which are a node's: node selector and affinity, taints,
// schedulability.)
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
	// gone (a repack plan, or migsim's chains); otherwise every destination is free now.
	Ordered bool
	// Repack: a repack plan (PlanRepack), which may move slices within their GPU.
	Repack bool
	// WholeGPUs: a plan for whole GPUs (PlanWholeDefrag): the GPUs of Target.Node it empties,
	// which the request takes (Target.GPU is the first; its profile and placement are zero).
	WholeGPUs []int
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
// For k = 1, 2, ... it looks at every usable GPU that k removals could open (a table lookup),
// in node then GPU order, at every set of k of its movable slices whose removal opens the
// request, and at every placement of the request there; a set is feasible when its slices can
// all be re-created at placements free now. Among the first 16 feasible candidates with k moves
// it takes the one moving the fewest compute slices, then the one whose GPU loses the least
// future placeability from before the plan to after it, then the first found. With opt.RepackGPUs, repack plans
// are tried after two moves (PlanRepack). The search, its exact pruning rules and why they
// change no answer: docs/design/defragmentation.md, Planner.
func PlanDefrag(nodes []Node, req *Request, movable MovableFunc, opt DefragOptions) DefragResult {
	if req == nil || req.n != 1 {
		return DefragResult{Outcome: DefragUnsupported}
	}
	return newDefragRun(nodes, req, movable, opt).plan(opt)
}

// newDefragRun is one PlanDefrag call's search state, with every pruning rule on.
func newDefragRun(nodes []Node, req *Request, movable MovableFunc, opt DefragOptions) *defragRun {
	maxMoves := opt.MaxMoves
	if maxMoves <= 0 {
		maxMoves = DefaultDefragMoves
	}
	deep := opt.DeepWork
	switch {
	case deep == 0:
		deep = DefaultDefragDeepWork
	case deep < 0:
		deep = -1
	}
	return &defragRun{nodes: nodes, req: req, movable: movable, dest: opt.Destinations, class: opt.DestinationClass,
		maxMoves: min(maxMoves, MaxDefragMoves), deepLeft: deep}
}

// plan is PlanDefrag's search, level by level.
func (r *defragRun) plan(opt DefragOptions) DefragResult {
	budget := opt.MaxRemovalSets
	if budget <= 0 {
		budget = DefaultDefragRemovalSets
	}
	defer r.release()
	if out := r.survey(); out != "" {
		return DefragResult{Outcome: out}
	}
	res := DefragResult{Outcome: DefragNoPlan}
	for k := 1; k <= r.maxMoves; k++ {
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
		if k == min(ShallowDefragMoves, r.maxMoves) && opt.RepackGPUs > 0 {
			rp := PlanRepack(r.nodes, r.req, r.movable, RepackOptions{MaxGPUs: opt.RepackGPUs, MaxMoves: r.maxMoves, Destinations: opt.Destinations})
			res.Bounded = res.Bounded || rp.Bounded
			if rp.Outcome == DefragPlanned {
				res.Outcome, res.Plan = DefragPlanned, rp.Plan
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
	cost      int32  // V of the target GPU before the plan less V after it (moves out, request in)
}

type defragRun struct {
	nodes   []Node
	req     *Request
	movable MovableFunc
	dest    DestinationFunc

	maxMoves int
	// noPrune turns the exact pruning rules off (defrag_prune.go, defrag_open.go), noOpen the
	// opening-set rule alone: only the tests and benchmarks that compare the search with and
	// without them set them (planDefragRules in defrag_prune_test.go).
	noPrune bool
	noOpen  bool
	// dests caches, per moved slice (GPU index in node then GPU order × 32 + slot), where it
	// may go; only with dest set.
	dests map[int]*destInfo
	// class and classes: DefragOptions.DestinationClass and, per positive class, its predicate
	// and allowed GPUs per (model, profile), see defrag_class.go.
	class    func(from SliceAt) int
	classes  []*classInfo       // per class number below maxDenseClass
	classMap map[int]*classInfo // the larger ones

	present  [numModels + 1]bool
	tabs     [numModels + 1]*modelTable           // the tables of the models present
	dts      [numModels + 1]*defragTable          // of those that have the request's profile
	hist     [numModels + 1][]int32               // usable GPUs per state index
	fitCount [numModels + 1][maxProfiles]int      // usable GPUs where the profile fits now
	fitList  [numModels + 1][maxProfiles][]gpuRef // those GPUs, built only for scarce profiles
	fitBuilt [numModels + 1][maxProfiles]bool
	// keep, per state index of the GPUs of a model, the slots whose slice has somewhere to go
	// were it moved, with movHopeless when moving all of them cannot open the request (see
	// stuck); nil with noPrune.
	keep [numModels + 1][]uint32
	// opens, per state index, whether some removal set of r.k of its slots opens the request
	// on a GPU in that state (stateOpens: stateUnknown, stateOpen or stateShut, plus r.k<<2);
	// nil with noPrune or DefragOptions.Destinations.
	opens [numModels + 1][]uint8
	// visit, per state index, what scan does with a GPU in that state at level k (visitStates).
	visit [numModels + 1][]uint32
	// memo, per GPU in node then GPU order, what the search learnt about it (gpuMemo); osets,
	// per model and state, the opening sets (defrag_open.go).
	memo  []gpuMemo
	osets [numModels + 1][]openSets

	k        int
	examined int
	stopped  bool
	// deepLeft is how many more GPUs the levels above ShallowDefragMoves may look at (-1: no
	// bound).
	deepLeft int
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

// gpuMemo is what one call's search learnt about one GPU, together so that a GPU's entries
// share a cache line.
type gpuMemo struct {
	// mov: the movable slots (movableSlots).
	mov uint32
	// slots: what was asked about its slots (slotMovable, slotNowhere).
	slots uint32
	// dest: the candidate slots that destStuck keeps; only with DefragOptions.DestinationClass
	// and the pruning rules.
	dest uint32
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
	var want [numModels + 1]int
	ngpus := 0
	for n := range r.nodes {
		gpus := r.nodes[n].GPUs
		ngpus += len(gpus)
		for i := range gpus {
			g := &gpus[i]
			m := g.State.model
			if !g.slicesNow() || m == 0 || m > numModels {
				continue
			}
			t := r.tabs[m]
			if t == nil {
				t = tableFor(m)
				r.tabs[m] = t
				r.present[m] = true
				r.hist[m] = make([]int32, len(t.states))
				want[m] = int(r.req.prof[m][0])
			}
			idx := int(g.State.idx)
			r.hist[m][idx]++
			if p := want[m]; p >= 0 && t.fits(idx, p) {
				return DefragFitsNow
			}
		}
	}
	room := false
	for m := Model(1); m <= numModels; m++ {
		t := r.tabs[m]
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
				if t.fits(st, q) {
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
	r.memo = memoPool.get(ngpus)
	for m := Model(1); m <= numModels; m++ {
		if r.tabs[m] != nil && want[m] >= 0 {
			r.dts[m] = defragTableFor(m)
		}
	}
	if !r.noPrune {
		for m := Model(1); m <= numModels; m++ {
			if r.dts[m] != nil {
				r.keep[m] = r.stuck(m, r.tabs[m], want[m])
				if r.dest == nil {
					r.opens[m] = make([]uint8, len(r.tabs[m].states))
				}
			}
		}
	}
	return ""
}

// site is one GPU as the search looks at it: its index in node then GPU order over all GPUs
// (gi, the key of the per-GPU memo), its node and GPU indexes, its model and that model's
// tables, its state index, and the request's profile index on the model.
type site struct {
	gi, n, g int
	m        Model
	t        *modelTable
	dt       *defragTable
	st       int
	p        int
}

// ref is the site's GPU as a gpuRef.
func (s *site) ref() gpuRef { return gpuRef{int32(s.n), int32(s.g)} }

// slice is the slice of slot sl on the site's GPU.
func (s *site) slice(sl int) SliceAt {
	x := s.t.slots[sl]
	return SliceAt{Node: s.n, GPU: s.g, Profile: s.t.profiles[x.prof], Placement: Placement{Start: int(x.start), Size: int(x.size)}}
}

// siteOf is GPU (n, g), gi in node then GPU order, of a model present.
func (r *defragRun) siteOf(gi, n, g int) site {
	st := r.nodes[n].GPUs[g].State
	return site{gi: gi, n: n, g: g, m: st.model, t: r.tabs[st.model], dt: r.dts[st.model], st: int(st.idx), p: int(r.req.prof[st.model][0])}
}
