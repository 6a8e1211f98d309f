package mig

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkRepackPlan carries the plan out as Evict would (every moved slice gone, then the
// request and the moved slices re-created) on copies of the states and fails the test unless
// every move takes an existing movable slice of unchanged profile to a node allow admits, all
// legal together with the request at its target, at most maxMoves moves, and, for a plan that
// is not Ordered, every destination can be taken now with the moved slices still in place.
func checkRepackPlan(t *testing.T, nodes []Node, req *Request, movable map[sliceKey]bool, allow func(from SliceAt, node int) bool, maxMoves int, plan DefragPlan) {
	t.Helper()
	if !plan.Repack {
		t.Fatalf("not marked a repack plan: %+v", plan)
	}
	if maxMoves > 0 && len(plan.Moves) > maxMoves {
		t.Fatalf("%d moves, bound %d", len(plan.Moves), maxMoves)
	}
	for _, mv := range plan.Moves {
		if allow != nil && !allow(mv.From, mv.To.Node) {
			t.Fatalf("moves %v to node %d, which its destinations refuse", mv.From, mv.To.Node)
		}
	}
	carryOut(t, nodes, req, movable, plan, false)
	if plan.Ordered {
		return
	}
	now := stateCopy(nodes)
	for _, mv := range plan.Moves {
		to := mv.To
		next, err := now[to.Node][to.GPU].Take(to.Profile, to.Placement)
		if err != nil {
			t.Fatalf("plan not Ordered, but %v -> %v cannot be held now: %v", mv.From, to, err)
		}
		now[to.Node][to.GPU] = next
	}
}

// TestPlanRepackFindsWhatFits: on one node of two to four usable GPUs whose slices all may
// move, a repack over all of them exists exactly when the slices and the request fit there
// (Optimum); every plan is legal, and plans are found that independent moves could not make.
func TestPlanRepackFindsWhatFits(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 3))
	var planned, noPlan, beyondMoves int
	for c := 0; c < 2000; c++ {
		m := caseModels(c)[0]
		gpus := 2 + rng.IntN(3)
		nodes, _ := randomCluster(rng, []Model{m}, 1, gpus, 1)
		movable := map[sliceKey]bool{}
		var items []RequestItem
		for g := range nodes[0].GPUs {
			nodes[0].GPUs[g].Usable = true
			for _, in := range nodes[0].GPUs[g].State.Instances() {
				movable[sliceKey{0, g, in.Placement.Start}] = true
				items = append(items, RequestItem{Profile: in.Profile, Count: 1})
			}
		}
		profs := m.Profiles()
		req := MustRequest(RequestItem{Profile: profs[rng.IntN(len(profs))].Name, Count: 1})
		res := PlanRepack(nodes, req, movableSet(movable), RepackOptions{MaxGPUs: gpus})
		if res.Bounded {
			t.Fatalf("case %d: bounded on %d GPUs", c, gpus)
		}
		if _, ok := Score(nodes[0], req); ok {
			if res.Outcome != DefragFitsNow {
				t.Fatalf("case %d: fits now, outcome %s", c, res.Outcome)
			}
			continue
		}
		opt, err := Optimum(m, append(items, RequestItem{Profile: req.Slices()[0], Count: 1}))
		if err != nil {
			t.Fatal(err)
		}
		switch res.Outcome {
		case DefragPlanned:
			if opt > gpus {
				t.Fatalf("case %d: planned, but the slices need %d GPUs of %d", c, opt, gpus)
			}
			checkRepackPlan(t, nodes, req, movable, nil, 0, res.Plan)
			planned++
			if PlanDefrag(nodes, req, movableSet(movable), DefragOptions{MaxMoves: 2}).Outcome == DefragNoPlan {
				beyondMoves++
			}
		case DefragNoPlan, DefragNoCapacity:
			if opt <= gpus {
				t.Fatalf("case %d (%s on %v): %s, but the slices fit %d GPUs", c, req.Slices()[0], nodes[0].GPUs, res.Outcome, opt)
			}
			noPlan++
		default:
			t.Fatalf("case %d: outcome %s", c, res.Outcome)
		}
	}
	t.Logf("planned %d (%d where two independent moves find none), no plan %d", planned, beyondMoves, noPlan)
	if planned == 0 || noPlan == 0 || beyondMoves == 0 {
		t.Errorf("the random cases miss an outcome: planned %d, beyond two moves %d, no plan %d", planned, beyondMoves, noPlan)
	}
}

// TestPlanRepackRespectsBounds: on random clusters where some slices may not move, some
// destinations are refused and plans are bounded in moves, every plan found keeps to all of it.
func TestPlanRepackRespectsBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 4))
	planned := 0
	for c := 0; c < 3000; c++ {
		nodes, movable := randomCluster(rng, caseModels(c), 1+rng.IntN(3), 1+rng.IntN(3), 0.7)
		m := nodes[0].GPUs[0].State.Model()
		profs := m.Profiles()
		req := MustRequest(RequestItem{Profile: profs[rng.IntN(len(profs))].Name, Count: 1})
		// Slices of even starts may go to even nodes only.
		allow := func(from SliceAt, node int) bool { return from.Placement.Start%2 == 1 || node%2 == 0 }
		dest := func(from SliceAt) func(int) bool {
			return func(node int) bool { return allow(from, node) }
		}
		maxMoves := 1 + rng.IntN(4)
		res := PlanRepack(nodes, req, movableSet(movable), RepackOptions{MaxGPUs: 2 + rng.IntN(3), MaxMoves: maxMoves, Destinations: dest})
		if res.Outcome == DefragPlanned {
			checkRepackPlan(t, nodes, req, movable, allow, maxMoves, res.Plan)
			planned++
		}
	}
	if planned == 0 {
		t.Error("no plan in the random cases")
	}
}

// TestPlanRepackOrderedExample: the 4g.40gb fits neither GPU and two independent moves cannot
// open it (GPU 0 is full; on GPU 1 the 1g.20gb at 2 blocks it and has nowhere free to go), but
// re-placing GPU 1 can: the 1g.10gb at 6 moves to 5 and the 1g.20gb into the room it leaves at
// 6, in that order.
func TestPlanRepackOrderedExample(t *testing.T) {
	g0, err := NewGPUState(H100_80GB, []Instance{{"4g.40gb", Placement{0, 4}}, {"3g.40gb", Placement{4, 4}}})
	if err != nil {
		t.Fatal(err)
	}
	g1, err := NewGPUState(H100_80GB, []Instance{{"1g.20gb", Placement{2, 2}}, {"1g.10gb", Placement{4, 1}}, {"1g.10gb", Placement{6, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []Node{{GPUs: []GPU{{State: g0, Usable: true}, {State: g1, Usable: true}}}}
	movable := map[sliceKey]bool{{0, 0, 0}: true, {0, 0, 4}: true, {0, 1, 2}: true, {0, 1, 4}: true, {0, 1, 6}: true}
	req := MustRequest(RequestItem{Profile: "4g.40gb", Count: 1})
	if out := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{MaxMoves: 2}); out.Outcome != DefragNoPlan {
		t.Fatalf("independent moves: %s, want NoPlan", out.Outcome)
	}
	res := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{MaxMoves: 2, RepackGPUs: 2})
	if res.Outcome != DefragPlanned || !res.Plan.Ordered || len(res.Plan.Moves) != 2 {
		t.Fatalf("with repack plans: %s %+v, want an Ordered plan of 2 moves", res.Outcome, res.Plan)
	}
	checkRepackPlan(t, nodes, req, movable, nil, 2, res.Plan)
	if tg := res.Plan.Target; tg.GPU != 1 || tg.Placement.Start != 0 {
		t.Fatalf("target %+v, want GPU 1 at 0", tg)
	}
	// With the 1g.10gb at 6 pinned, nothing is left to do.
	delete(movable, sliceKey{0, 1, 6})
	if out := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{MaxMoves: 2, RepackGPUs: 2}); out.Outcome != DefragNoPlan {
		t.Fatalf("with the 1g.10gb at 6 pinned: %s %+v, want NoPlan", out.Outcome, out.Plan)
	}
	// One move is too few.
	if out := PlanDefrag(nodes, req, movableSet(map[sliceKey]bool{{0, 1, 2}: true, {0, 1, 6}: true}), DefragOptions{MaxMoves: 1, RepackGPUs: 2}); out.Outcome != DefragNoPlan {
		t.Fatalf("one move: %s, want NoPlan", out.Outcome)
	}
}

// BenchmarkPlanRepack is the scheduler's call (PlanDefrag with RepackGPUs 4, MaxMoves 4) on
// 5,000 nodes × 8 H100 next to the same call without repack plans ("repack-0"), in the same
// process. "random": benchCluster's clusters for a pending 7g.80gb (independent plans exist, so
// repack plans are never asked for). "one-room": every GPU holds a 4g.40gb at 0 and a 3g.40gb at
// 4 (90 % movable) but the last one, which holds TestPlanRepackOrderedExample's GPU 1; the
// pending 4g.40gb has no independent plan (each full GPU's 4g.40gb is stuck) and one repack
// plan. "no-plan": the same with that GPU's slices pinned, so every set is tried and fails.
// It reports benchPlans' percentiles and the share of calls that found a plan and a repack plan.
func BenchmarkPlanRepack(b *testing.B) {
	oneRoom := func(pinned bool) ([]Node, MovableFunc) {
		full, _ := NewGPUState(H100_80GB, []Instance{{"4g.40gb", Placement{0, 4}}, {"3g.40gb", Placement{4, 4}}})
		room, _ := NewGPUState(H100_80GB, []Instance{{"1g.20gb", Placement{2, 2}}, {"1g.10gb", Placement{4, 1}}, {"1g.10gb", Placement{6, 1}}})
		nodes := make([]Node, 5000)
		for n := range nodes {
			nodes[n].GPUs = make([]GPU, 8)
			for g := range nodes[n].GPUs {
				nodes[n].GPUs[g] = GPU{State: full, Usable: true}
			}
		}
		last := len(nodes) - 1
		nodes[last].GPUs[7].State = room
		rng := rand.New(rand.NewPCG(5000, 10))
		fixed := make([]uint8, len(nodes)*8)
		for i := range fixed {
			if rng.Float64() >= 0.9 {
				fixed[i] = 1<<0 | 1<<4
			}
		}
		fixed[last*8+7] = 1 << 4
		if pinned {
			fixed[last*8+7] = 0xff
		}
		return nodes, func(n, g int, _ Profile, pl Placement) bool { return fixed[n*8+g]&(1<<pl.Start) == 0 }
	}
	for _, bc := range []struct {
		name    string
		profile string
		build   func(rng *rand.Rand, pending Profile) ([]Node, MovableFunc)
	}{
		{"random", "7g.80gb", func(rng *rand.Rand, pending Profile) ([]Node, MovableFunc) {
			return benchCluster(rng, 5000, pending, 0.9, 0)
		}},
		{"one-room", "4g.40gb", func(*rand.Rand, Profile) ([]Node, MovableFunc) { return oneRoom(false) }},
		{"no-plan", "4g.40gb", func(*rand.Rand, Profile) ([]Node, MovableFunc) { return oneRoom(true) }},
	} {
		for _, repack := range []int{0, DefaultRepackGPUs} {
			b.Run(fmt.Sprintf("%s/repack-%d", bc.name, repack), func(b *testing.B) {
				pending, _ := H100_80GB.Profile(bc.profile)
				req := MustRequest(RequestItem{Profile: bc.profile, Count: 1})
				rng := rand.New(rand.NewPCG(5000, 9))
				sc := benchScenarios(func() ([]Node, MovableFunc) { return bc.build(rng, pending) })
				results := benchPlans(b, func(i int, noPrune bool) DefragResult {
					s := sc[i%len(sc)]
					return planDefrag(s.nodes, req, s.movable, DefragOptions{MaxMoves: MaxDefragMoves, RepackGPUs: repack}, noPrune)
				})
				planned, repacks := 0, 0
				for _, res := range results {
					if res.Outcome == DefragPlanned {
						planned++
						if res.Plan.Repack {
							repacks++
						}
					}
				}
				b.ReportMetric(float64(planned)/float64(b.N), "planned")
				b.ReportMetric(float64(repacks)/float64(b.N), "repack-plans")
			})
		}
	}
}

// The sets PlanRepack draws beyond the roomiest by one key: a 1g.10gb fits nowhere on GPUs
// that have a free compute slice and no free memory (two 3g.40gb) and GPUs that have a free
// memory slice and no free compute (4g.40gb, 2g.20gb, 1g.10gb); the two roomiest by either key
// are alike and cannot help, one of each, taken in turn, can (three moves). And when the GPUs
// roomiest by compute hold a slice that may not move, the roomiest of those whose every slice
// may move give the plan.
func TestPlanRepackSets(t *testing.T) {
	in := func(p string, start int) Instance {
		q, _ := H100_80GB.Profile(p)
		return Instance{Profile: p, Placement: Placement{Start: start, Size: q.MemorySlices}}
	}
	compute := h100(t, in("3g.40gb", 0), in("3g.40gb", 4))
	memory := h100(t, in("4g.40gb", 0), in("2g.20gb", 4), in("1g.10gb", 6))
	nodes := []Node{{GPUs: []GPU{compute, compute, compute, memory, memory, memory}}}
	req := MustRequest(RequestItem{Profile: "1g.10gb", Count: 1})
	all := func(int, int, Profile, Placement) bool { return true }
	res := PlanRepack(nodes, req, all, RepackOptions{MaxGPUs: 2, MaxMoves: 4})
	if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 3 {
		t.Fatalf("in turn: %+v, want a plan of three moves", res)
	}
	every := map[sliceKey]bool{}
	for g, gpu := range nodes[0].GPUs {
		for _, in := range gpu.State.Instances() {
			every[sliceKey{0, g, in.Placement.Start}] = true
		}
	}
	checkRepackPlan(t, nodes, req, every, nil, 4, res.Plan)

	// GPUs 0-2 (roomiest by compute, first in order) each hold an unmovable 3g.40gb@0.
	pinned := func(n, g int, _ Profile, pl Placement) bool { return g >= 3 || pl.Start != 0 }
	nodes = []Node{{GPUs: []GPU{compute, compute, compute, memory, memory, memory, compute}}}
	res = PlanRepack(nodes, req, pinned, RepackOptions{MaxGPUs: 2, MaxMoves: 4})
	if res.Outcome != DefragPlanned {
		t.Fatalf("movable sets: %+v, want a plan", res)
	}
	for _, mv := range res.Plan.Moves {
		if !pinned(mv.From.Node, mv.From.GPU, mv.From.Profile, mv.From.Placement) {
			t.Fatalf("moves %v, which may not move", mv.From)
		}
	}
}
