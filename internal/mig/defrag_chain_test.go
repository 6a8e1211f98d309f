package mig

import (
	"math/rand/v2"
	"os"
	"testing"
)

// bruteChain is the chain oracle: whether some movable slice b on a GPU X other than the
// target can move to a place free now on a GPU other than the target (X itself included, legal
// with what follows), after which the target's movable slice a fits on X without b, after
// which the request fits on the target without a.
func bruteChain(nodes []Node, req *Request, movable map[sliceKey]bool) bool {
	gpus := usableGPUs(nodes)
	state := func(h gpuAt) GPUState { return nodes[h.n].GPUs[h.g].State }
	for _, T := range gpus {
		m := state(T).Model()
		p, ok := req.Profile(0, m)
		if !ok {
			continue
		}
		for _, a := range state(T).Instances() {
			if !movable[sliceKey{T.n, T.g, a.Placement.Start}] {
				continue
			}
			qa, _ := m.Profile(a.Profile)
			tMinus, _ := state(T).Release(qa, a.Placement)
			if len(tMinus.Candidates(p)) == 0 {
				continue
			}
			for _, X := range gpus {
				if X == T || state(X).Model() != m {
					continue
				}
				for _, b := range state(X).Instances() {
					if !movable[sliceKey{X.n, X.g, b.Placement.Start}] {
						continue
					}
					qb, _ := m.Profile(b.Profile)
					xMinus, _ := state(X).Release(qb, b.Placement)
					for _, d := range qa.Placements() {
						xd, err := xMinus.Take(qa, d)
						if err != nil {
							continue
						}
						for _, Y := range gpus {
							if Y == T || state(Y).Model() != m {
								continue
							}
							for _, e := range qb.Placements() {
								if Y == X {
									if memMask(e)&usedMask(state(X)) == 0 {
										if _, err := xd.Take(qb, e); err == nil {
											return true
										}
									}
								} else if _, err := state(Y).Take(qb, e); err == nil {
									return true
								}
							}
						}
					}
				}
			}
		}
	}
	return false
}

// checkChain replays an ordered plan move by move (each slice released, then re-created) and
// fails the test unless every step is legal, each destination overlaps no instance but those
// of the slices moved before it, and the request then fits at the target.
func checkChain(t *testing.T, nodes []Node, req *Request, movable map[sliceKey]bool, plan DefragPlan) {
	t.Helper()
	states := stateCopy(nodes)
	var gone []SliceAt
	for _, mv := range plan.Moves {
		f, to := mv.From, mv.To
		if !movable[sliceKey{f.Node, f.GPU, f.Placement.Start}] {
			t.Fatalf("moves %v, which is not movable", f)
		}
		next, err := states[f.Node][f.GPU].Release(f.Profile, f.Placement)
		if err != nil {
			t.Fatalf("move from %v: %v", f, err)
		}
		states[f.Node][f.GPU] = next
		gone = append(gone, f)
		busy := usedMask(nodes[to.Node].GPUs[to.GPU].State)
		for _, g := range gone {
			if g.Node == to.Node && g.GPU == to.GPU {
				busy &^= memMask(g.Placement)
			}
		}
		if memMask(to.Placement)&busy != 0 || to.Profile.Name != f.Profile.Name || !nodes[to.Node].GPUs[to.GPU].Usable {
			t.Fatalf("move %v -> %v: the destination is taken or not the same profile on a usable GPU", f, to)
		}
		if states[to.Node][to.GPU], err = states[to.Node][to.GPU].Take(to.Profile, to.Placement); err != nil {
			t.Fatalf("move %v -> %v: %v", f, to, err)
		}
	}
	tg := plan.Target
	if p, ok := req.Profile(0, nodes[tg.Node].GPUs[tg.GPU].State.Model()); !ok || p.Name != tg.Profile.Name {
		t.Fatalf("target %v is not the request's profile", tg)
	}
	if _, err := states[tg.Node][tg.GPU].Take(tg.Profile, tg.Placement); err != nil {
		t.Fatalf("target %v: %v", tg, err)
	}
}

// With Chains: plans of one or two independent moves as before; when there is none, a chain
// exactly when the oracle finds one, and every chain replays legally in its order.
func TestPlanDefragChainsAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 4))
	count := map[string]int{}
	for c := 0; c < 5000; c++ {
		models := caseModels(c)
		nodes, movable := randomCluster(rng, models, 2+rng.IntN(2), 1+rng.IntN(2), 0.8)
		profs := models[0].Profiles()
		pi := len(profs)/2 + rng.IntN(len(profs)-len(profs)/2)
		req := MustRequest(RequestItem{Profile: profs[pi].Name, Count: 1})
		res := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{MaxMoves: 2, Chains: true})
		if res.Outcome == DefragFitsNow || res.Outcome == DefragNoCapacity {
			count[string(res.Outcome)]++
			continue
		}
		plain := bruteDefrag(nodes, req, movable, nil, 2)
		chain := bruteChain(nodes, req, movable)
		switch {
		case plain > 0:
			if res.Outcome != DefragPlanned || res.Plan.Ordered || len(res.Plan.Moves) != plain {
				t.Fatalf("case %d (%s on %v): brute force %d independent moves, got %+v", c, req.Slices()[0], nodes, plain, res)
			}
			checkPlan(t, nodes, req, movable, res.Plan)
			count["independent"]++
		case chain:
			if res.Outcome != DefragPlanned || !res.Plan.Ordered || len(res.Plan.Moves) != 2 {
				t.Fatalf("case %d (%s on %v): the oracle finds a chain, got %+v", c, req.Slices()[0], nodes, res)
			}
			checkChain(t, nodes, req, movable, res.Plan)
			count["chain"]++
		default:
			if res.Outcome != DefragNoPlan {
				t.Fatalf("case %d (%s on %v): no plan nor chain by brute force, got %+v", c, req.Slices()[0], nodes, res)
			}
			count["none"]++
		}
	}
	t.Logf("%v", count)
	if count["chain"] < 30 || count["none"] == 0 || count["independent"] == 0 {
		t.Errorf("the random cases miss an outcome: %v", count)
	}
}

// BenchmarkPlanDefragChain: 5,000 nodes × 8 H100; one GPU holds a movable 2g.20gb that blocks
// a pending 7g.80gb, the 39,999 others leave no free room for a 2g. "found": the others are
// 4g.40gb@0 + 1g.10gb@4 + 1g.10gb@6 (movable): the 1g at 4 can move to slot 5 of another GPU,
// then the 2g into its room (a chain). "none": the others are 4g.40gb@0 + 2g.20gb@4, room for a
// 1g only: the 2g at 4 could leave room for the 2g but has nowhere to go itself, so no chain.
// "crowded": the others as in "none", the one GPU a 3g.40gb@4: the others' 4g.40gb and
// 2g.20gb can only go there, not both, and its 3g.40gb nowhere (no chain either). None has a
// plan of independent moves, so both levels are searched first.
func BenchmarkPlanDefragChain(b *testing.B) {
	for _, bc := range []struct {
		name   string
		others []Instance
		target Instance
	}{
		{"found", []Instance{{"4g.40gb", Placement{0, 4}}, {"1g.10gb", Placement{4, 1}}, {"1g.10gb", Placement{6, 1}}}, Instance{"2g.20gb", Placement{0, 2}}},
		{"none", []Instance{{"4g.40gb", Placement{0, 4}}, {"2g.20gb", Placement{4, 2}}}, Instance{"2g.20gb", Placement{0, 2}}},
		{"crowded", []Instance{{"4g.40gb", Placement{0, 4}}, {"2g.20gb", Placement{4, 2}}}, Instance{"3g.40gb", Placement{4, 4}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			other := h100(b, bc.others...)
			nodes := make([]Node, 5000)
			for n := range nodes {
				nodes[n].GPUs = make([]GPU, 8)
				for g := range nodes[n].GPUs {
					nodes[n].GPUs[g] = other
				}
			}
			nodes[2500].GPUs[3] = h100(b, bc.target)
			chainsOn := os.Getenv("DEFRAG_BENCH_NO_CHAINS") == ""
			req := MustRequest(RequestItem{Profile: "7g.80gb", Count: 1})
			all := func(int, int, Profile, Placement) bool { return true }
			planned := 0
			for _, res := range benchPlans(b, func(_ int, noPrune bool) DefragResult {
				return planDefrag(nodes, req, all, DefragOptions{Chains: chainsOn}, noPrune)
			}) {
				if res.Outcome == DefragPlanned {
					planned++
					if !res.Plan.Ordered {
						b.Fatalf("not a chain: %+v", res.Plan)
					}
				}
			}
			b.ReportMetric(float64(planned)/float64(b.N), "planned")
		})
	}
}
