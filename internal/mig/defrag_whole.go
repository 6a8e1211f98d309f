package mig

import (
	"cmp"
	"iter"
	"slices"
)

// Defragmentation for whole GPUs (docs/design/whole-gpus.md, "Defragmentation"): a request for
// n whole GPUs of one node fits nowhere, yet some node has n GPUs that would serve whole once
// empty (GPU.WholeOnceEmpty) and the slices on them could run elsewhere. PlanWholeDefrag finds
// the fewest moves of movable slices that empty n such GPUs of one node, each slice re-created
// at a placement free now on a GPU in MIG mode that is not one of the n (so every room of a plan
// can be held before anything is evicted, as for slices: defrag.go).

// wholeDefragCandidates bounds the GPUs of one node a whole-GPU plan considers (the cheapest).
const wholeDefragCandidates = 16

// wholeDefragWork is the work bound when DefragOptions.MaxRemovalSets is zero: how many
// destinations the search may try, over every plan it examines.
const wholeDefragWork = 1 << 16

// wholeCandidate is a GPU a whole-GPU plan may empty: the slices to move off it.
type wholeCandidate struct {
	gpu      int
	switches bool
	slices   []SliceAt
}

// PlanWholeDefrag finds the fewest moves (at most opt.MaxMoves) of slices movable allows after
// which n GPUs of one node serve whole. Nodes are tried by the fewest slices on their n
// cheapest GPUs (a bound that needs no movability), then in order; on the first node with a
// plan of the fewest moves it takes the set with the fewest GPUs to switch out of MIG mode, then
// the lowest GPU indices. A moved slice goes where it fits now, on a usable GPU in MIG mode of
// its model on a node opt.Destinations allows, other than the GPUs being emptied: to the fullest
// such GPU first (the fewest free compute slices once it is there), then the lowest node, GPU
// and start; the search tries the other destinations when a later slice of the plan finds
// none. It is exact in the number of moves until opt.MaxRemovalSets destinations have been
// tried (Bounded). Plan.WholeGPUs lists the GPUs of Plan.Target.Node the request then takes;
// Outcome is FitsNow when n GPUs of a node serve whole already, Unsupported for n out of range.
func PlanWholeDefrag(nodes []Node, n int, movable MovableFunc, opt DefragOptions) DefragResult {
	if n <= 0 || n > MaxWholeGPUs {
		return DefragResult{Outcome: DefragUnsupported}
	}
	maxMoves := cmp.Or(opt.MaxMoves, DefaultDefragMoves)
	maxMoves = min(maxMoves, MaxDefragMoves)
	work := cmp.Or(opt.MaxRemovalSets, wholeDefragWork)
	type nodeBound struct{ node, moves int }
	var order []nodeBound
	var counts []int
	for ni, node := range nodes {
		counts = counts[:0]
		for _, g := range node.GPUs {
			if ok, _ := g.WholeOnceEmpty(); ok && !g.InUse {
				k := 0
				if g.Mode == ModeMIG {
					k = g.State.InstanceCount()
				}
				counts = append(counts, k)
			}
		}
		if len(counts) < n {
			continue
		}
		slices.Sort(counts)
		lb := 0
		for _, k := range counts[:n] {
			lb += k
		}
		if lb == 0 {
			return DefragResult{Outcome: DefragFitsNow}
		}
		if lb <= maxMoves {
			order = append(order, nodeBound{ni, lb})
		}
	}
	if len(order) == 0 {
		return DefragResult{Outcome: DefragNoPlan}
	}
	slices.SortStableFunc(order, func(a, b nodeBound) int { return cmp.Or(cmp.Compare(a.moves, b.moves), cmp.Compare(a.node, b.node)) })
	s := newWholeDefragSearch(nodes, opt.Destinations, work)
	res := DefragResult{Outcome: DefragNoPlan}
	bestMoves := maxMoves + 1
search:
	for _, nb := range order {
		if nb.moves >= bestMoves {
			break // sorted by the bound: no later node moves fewer
		}
		cands := emptiableGPUs(nodes, nb.node, movable)
		if len(cands) < n {
			continue
		}
		for _, set := range wholeSets(cands, n, min(maxMoves, bestMoves-1)) {
			plan, ok := s.place(nb.node, set)
			if s.stopped {
				res.Bounded = true
				break search
			}
			if ok {
				res.Outcome, res.Plan, bestMoves = DefragPlanned, plan, len(plan.Moves)
				break // the node's sets come cheapest first
			}
		}
	}
	res.RemovalSets = s.tried
	return res
}

// emptiableGPUs are node ni's GPUs that would serve whole once empty, none held whole, every
// slice on them movable: cheapest first (fewest slices, no switch, lowest index), at most
// wholeDefragCandidates.
func emptiableGPUs(nodes []Node, ni int, movable MovableFunc) []wholeCandidate {
	var out []wholeCandidate
	for gi, g := range nodes[ni].GPUs {
		ok, switches := g.WholeOnceEmpty()
		if !ok || g.InUse {
			continue
		}
		c := wholeCandidate{gpu: gi, switches: switches}
		all := true
		if g.Mode == ModeMIG {
			m := g.State.Model()
			for _, in := range g.State.Instances() {
				p, err := m.Profile(in.Profile)
				if err != nil || !movable(ni, gi, p, in.Placement) {
					all = false
					break
				}
				c.slices = append(c.slices, SliceAt{Node: ni, GPU: gi, Profile: p, Placement: in.Placement})
			}
		}
		if all {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b wholeCandidate) int {
		return cmp.Or(cmp.Compare(len(a.slices), len(b.slices)), compareBool(a.switches, b.switches), cmp.Compare(a.gpu, b.gpu))
	})
	if len(out) > wholeDefragCandidates {
		out = out[:wholeDefragCandidates]
	}
	return out
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// wholeSet is n candidates of one node.
type wholeSet []wholeCandidate

func (s wholeSet) cost() (moves, switches int) {
	for _, c := range s {
		moves += len(c.slices)
		if c.switches {
			switches++
		}
	}
	return moves, switches
}

// wholeSets lists every set of n of cands moving at most maxMoves slices, cheapest first
// (moves, switches, then the candidates' order).
func wholeSets(cands []wholeCandidate, n, maxMoves int) []wholeSet {
	var out []wholeSet
	var cur wholeSet
	var walk func(from, moves int)
	walk = func(from, moves int) {
		if len(cur) == n {
			out = append(out, slices.Clone(cur))
			return
		}
		for i := from; i <= len(cands)-(n-len(cur)); i++ {
			if m := moves + len(cands[i].slices); m <= maxMoves {
				cur = append(cur, cands[i])
				walk(i+1, m)
				cur = cur[:len(cur)-1]
			}
		}
	}
	walk(0, 0)
	slices.SortStableFunc(out, func(a, b wholeSet) int {
		am, as := a.cost()
		bm, bs := b.cost()
		return cmp.Or(cmp.Compare(am, bm), cmp.Compare(as, bs))
	})
	return out
}

// wholeDefragSearch finds destinations for the slices of a set (place), within a work bound.
type wholeDefragSearch struct {
	nodes   []Node
	dest    DestinationFunc
	work    int
	tried   int
	stopped bool
	// rooms are the usable GPUs in MIG mode with a free compute slice: the only destinations.
	rooms []gpuRef
	// states overlays the GPU states the moves of the plan being built take room on.
	states map[gpuRef]GPUState
}

func newWholeDefragSearch(nodes []Node, dest DestinationFunc, work int) *wholeDefragSearch {
	s := &wholeDefragSearch{nodes: nodes, dest: dest, work: work}
	// Bucketed by free compute slices (fullest first), in node and GPU order within a bucket.
	var buckets [maxStarts + 1][]gpuRef
	for n, node := range nodes {
		for g, gpu := range node.GPUs {
			if f := gpu.State.FreeComputeSlices(); gpu.Usable && gpu.Mode == ModeMIG && gpu.State.Valid() && f > 0 {
				buckets[min(f, maxStarts)] = append(buckets[min(f, maxStarts)], gpuRef{int32(n), int32(g)})
			}
		}
	}
	for _, b := range buckets {
		s.rooms = append(s.rooms, b...)
	}
	return s
}

// place finds a destination for every slice of set (node ni), largest first, backtracking
// over each slice's destinations; it returns the plan.
func (s *wholeDefragSearch) place(ni int, set wholeSet) (DefragPlan, bool) {
	emptied := map[int]bool{}
	var moving []SliceAt
	for _, c := range set {
		emptied[c.gpu] = true
		moving = append(moving, c.slices...)
	}
	slices.SortStableFunc(moving, func(a, b SliceAt) int {
		return cmp.Or(cmp.Compare(b.Profile.ComputeSlices, a.Profile.ComputeSlices), cmp.Compare(b.Profile.MemorySlices, a.Profile.MemorySlices))
	})
	s.states = map[gpuRef]GPUState{}
	moves := make([]Move, len(moving))
	var try func(i int) bool
	try = func(i int) bool {
		if i == len(moving) {
			return true
		}
		for to := range s.destinations(moving[i], ni, emptied) {
			if s.tried++; s.tried > s.work {
				s.stopped = true
				return false
			}
			ref := gpuRef{int32(to.Node), int32(to.GPU)}
			prev, had := s.states[ref]
			st := s.state(ref)
			next, err := st.Take(to.Profile, to.Placement)
			if err != nil {
				continue
			}
			s.states[ref] = next
			moves[i] = Move{From: moving[i], To: to}
			if try(i + 1) {
				return true
			}
			if s.stopped {
				return false
			}
			if had {
				s.states[ref] = prev
			} else {
				delete(s.states, ref)
			}
		}
		return false
	}
	if !try(0) {
		return DefragPlan{}, false
	}
	plan := DefragPlan{Moves: moves, Target: SliceAt{Node: ni, GPU: set[0].gpu}}
	for _, c := range set {
		plan.WholeGPUs = append(plan.WholeGPUs, c.gpu)
	}
	slices.Sort(plan.WholeGPUs)
	plan.Target.GPU = plan.WholeGPUs[0]
	return plan, true
}

func (s *wholeDefragSearch) state(ref gpuRef) GPUState {
	if st, ok := s.states[ref]; ok {
		return st
	}
	return s.nodes[ref.node].GPUs[ref.gpu].State
}

// destinations yields where the slice from may be re-created now: a placement free on a usable
// GPU in MIG mode of its model on a node the options allow, not one of node ni's emptied GPUs;
// the fullest GPU first (the fewest free compute slices before the plan), then node, GPU and
// start.
func (s *wholeDefragSearch) destinations(from SliceAt, ni int, emptied map[int]bool) iter.Seq[SliceAt] {
	return func(yield func(SliceAt) bool) {
		var allow func(int) bool
		if s.dest != nil {
			allow = s.dest(from)
		}
		var buf [maxStarts]Placement
		p := from.Profile
		for _, ref := range s.rooms {
			n, g := int(ref.node), int(ref.gpu)
			if n == ni && emptied[g] {
				continue
			}
			st := s.state(ref)
			if st.Model() != p.Model || !st.Fits(p) {
				continue // a moved slice stays on its model, as for slices (DefragOptions.Destinations)
			}
			if allow != nil && !allow(n) {
				continue
			}
			for _, pl := range st.AppendCandidates(buf[:0], p) {
				if !yield(SliceAt{Node: n, GPU: g, Profile: p, Placement: pl}) {
					return
				}
			}
		}
	}
}
