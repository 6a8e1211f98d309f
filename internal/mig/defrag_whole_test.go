package mig

import (
	"math/rand/v2"
	"testing"
)

// randomModeCluster is randomCluster with GPU modes: some GPUs whole (free or held), the MIG ones
// switchable or not.
func randomModeCluster(rng *rand.Rand, models []Model, nodes, gpus int) ([]Node, map[sliceKey]bool) {
	out, movable := randomCluster(rng, models, nodes, gpus, 0.8)
	for n := range out {
		for g := range out[n].GPUs {
			gpu := &out[n].GPUs[g]
			switch rng.IntN(6) {
			case 0:
				gpu.Mode, gpu.State, gpu.Switchable = ModeWhole, EmptyGPU(gpu.State.Model()), true
			case 1:
				gpu.Mode, gpu.State, gpu.InUse = ModeWhole, EmptyGPU(gpu.State.Model()), true
			case 2:
				gpu.Switchable = false
			default:
				gpu.Switchable = true
			}
		}
	}
	return out, movable
}

// wholeOracle is the fewest moves (and then switches) that empty n GPUs of one node: every set of
// n emptiable GPUs of a node, each of its slices re-created at any placement free now on a usable
// MIG GPU of its model that is not in the set, by trying every assignment. -1 when none.
func wholeOracle(nodes []Node, n int, movable MovableFunc, maxMoves int) (int, int) {
	bestM, bestS := -1, 0
	for ni, node := range nodes {
		var cands []int
		for g, gpu := range node.GPUs {
			if ok, _ := gpu.WholeOnceEmpty(); ok && !gpu.InUse {
				cands = append(cands, g)
			}
		}
		for mask := 0; mask < 1<<len(cands); mask++ {
			var set []int
			for i, g := range cands {
				if mask&(1<<i) != 0 {
					set = append(set, g)
				}
			}
			if len(set) != n {
				continue
			}
			in := map[int]bool{}
			var moving []SliceAt
			switches, ok := 0, true
			for _, g := range set {
				in[g] = true
				gpu := node.GPUs[g]
				if gpu.Mode != ModeMIG {
					continue
				}
				switches++
				for _, inst := range gpu.State.Instances() {
					p, _ := gpu.State.Model().Profile(inst.Profile)
					if !movable(ni, g, p, inst.Placement) {
						ok = false
					}
					moving = append(moving, SliceAt{Node: ni, GPU: g, Profile: p, Placement: inst.Placement})
				}
			}
			if !ok || len(moving) > maxMoves || len(moving) == 0 {
				continue
			}
			if bestM >= 0 && (len(moving) > bestM || len(moving) == bestM && switches >= bestS) {
				continue
			}
			states := map[[2]int]GPUState{}
			var assign func(i int) bool
			assign = func(i int) bool {
				if i == len(moving) {
					return true
				}
				for dn, dnode := range nodes {
					for dg, dgpu := range dnode.GPUs {
						if dn == ni && in[dg] || !dgpu.Usable || dgpu.Mode != ModeMIG || dgpu.State.Model() != moving[i].Profile.Model {
							continue
						}
						k := [2]int{dn, dg}
						st, had := states[k]
						if !had {
							st = dgpu.State
						}
						for _, pl := range st.Candidates(moving[i].Profile) {
							next, _ := st.Take(moving[i].Profile, pl)
							states[k] = next
							if assign(i + 1) {
								return true
							}
							states[k] = st
						}
						if !had {
							delete(states, k)
						}
					}
				}
				return false
			}
			if assign(0) {
				bestM, bestS = len(moving), switches
			}
		}
	}
	return bestM, bestS
}

// PlanWholeDefrag against the oracle on 8,000 random small clusters of H100s and A30s in mixed modes:
// the same fewest moves (switches are compared within the node it chooses only), and every plan
// valid: n emptiable GPUs of one node, each
// slice on them moved to a placement free now (beside the plan's earlier destinations) on a
// usable MIG GPU of its model outside the set, nothing else moved.
func TestPlanWholeDefragAgainstOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 12))
	const maxMoves = 4
	outcomes := map[DefragOutcome]int{}
	for c := 0; c < 8000; c++ {
		models := []Model{H100_80GB}
		if c%4 == 3 {
			models = []Model{H100_80GB, A30_24GB}
		}
		nodes, set := randomModeCluster(rng, models, 1+rng.IntN(3), 2+rng.IntN(3))
		n := 1 + rng.IntN(2)
		movable := movableSet(set)
		res := PlanWholeDefrag(nodes, n, movable, DefragOptions{MaxMoves: maxMoves})
		outcomes[res.Outcome]++
		if res.Bounded {
			t.Fatalf("case %d: bounded on a small cluster", c)
		}
		fitsNow := false
		for _, node := range nodes {
			if _, ok := ScoreWhole(node, n); ok {
				fitsNow = true
			}
		}
		if fitsNow {
			if res.Outcome != DefragFitsNow {
				t.Fatalf("case %d: fits now, outcome %s", c, res.Outcome)
			}
			continue
		}
		wantM, wantS := wholeOracle(nodes, n, movable, maxMoves)
		if wantM < 0 {
			if res.Outcome != DefragNoPlan {
				t.Fatalf("case %d: the oracle finds no plan, the planner %s %+v", c, res.Outcome, res.Plan)
			}
			continue
		}
		if res.Outcome != DefragPlanned {
			t.Fatalf("case %d: the oracle moves %d, the planner says %s", c, wantM, res.Outcome)
		}
		p := res.Plan
		checkWholePlan(t, c, nodes, n, movable, p)
		switches := 0
		for _, g := range p.WholeGPUs {
			if nodes[p.Target.Node].GPUs[g].Mode == ModeMIG {
				switches++
			}
		}
		if len(p.Moves) != wantM || switches < wantS {
			t.Fatalf("case %d: %d moves, %d switches; the oracle %d, at least %d", c, len(p.Moves), switches, wantM, wantS)
		}
	}
	if outcomes[DefragPlanned] < 300 || outcomes[DefragNoPlan] < 100 || outcomes[DefragFitsNow] < 100 {
		t.Errorf("outcomes %v: the cases do not cover each answer", outcomes)
	}
}

func checkWholePlan(t *testing.T, c int, nodes []Node, n int, movable MovableFunc, p DefragPlan) {
	t.Helper()
	if len(p.WholeGPUs) != n || p.Target.GPU != p.WholeGPUs[0] {
		t.Fatalf("case %d: plan %+v does not take %d GPUs", c, p, n)
	}
	ni := p.Target.Node
	set := map[int]bool{}
	for _, g := range p.WholeGPUs {
		if ok, _ := nodes[ni].GPUs[g].WholeOnceEmpty(); !ok || nodes[ni].GPUs[g].InUse || set[g] {
			t.Fatalf("case %d: GPU %d of node %d cannot serve whole once empty", c, g, ni)
		}
		set[g] = true
	}
	moved := map[sliceKey]bool{}
	states := map[[2]int]GPUState{}
	for _, mv := range p.Moves {
		f, to := mv.From, mv.To
		if f.Node != ni || !set[f.GPU] || !movable(f.Node, f.GPU, f.Profile, f.Placement) || moved[sliceKey{f.Node, f.GPU, f.Placement.Start}] {
			t.Fatalf("case %d: move %v is not of a movable slice of the emptied GPUs", c, f)
		}
		moved[sliceKey{f.Node, f.GPU, f.Placement.Start}] = true
		if to.Node == ni && set[to.GPU] || to.Profile.Name != f.Profile.Name || to.Profile.Model != f.Profile.Model || nodes[to.Node].GPUs[to.GPU].Mode != ModeMIG || !nodes[to.Node].GPUs[to.GPU].Usable {
			t.Fatalf("case %d: move %v -> %v lands badly", c, f, to)
		}
		k := [2]int{to.Node, to.GPU}
		st, ok := states[k]
		if !ok {
			st = nodes[to.Node].GPUs[to.GPU].State
		}
		next, err := st.Take(to.Profile, to.Placement)
		if err != nil {
			t.Fatalf("case %d: move %v -> %v: the destination is not free now: %v", c, f, to, err)
		}
		states[k] = next
	}
	for g := range set {
		if gpu := nodes[ni].GPUs[g]; gpu.Mode == ModeMIG && len(gpu.State.Instances()) != countFrom(moved, ni, g) {
			t.Fatalf("case %d: GPU %d keeps slices the plan does not move", c, g)
		}
	}
}

func countFrom(moved map[sliceKey]bool, n, g int) int {
	k := 0
	for s := range moved {
		if s.node == n && s.gpu == g {
			k++
		}
	}
	return k
}

func TestPlanWholeDefragRefuses(t *testing.T) {
	if r := PlanWholeDefrag(nil, 0, nil, DefragOptions{}); r.Outcome != DefragUnsupported {
		t.Errorf("n = 0: %s", r.Outcome)
	}
	if r := PlanWholeDefrag(nil, 1, nil, DefragOptions{}); r.Outcome != DefragNoPlan {
		t.Errorf("no nodes: %s", r.Outcome)
	}
}

// The whole-GPU planner on the slice planner's bench clusters (5,000 nodes × 8 H100, no GPU
// empty, every GPU switchable), for 1 and 2 whole GPUs, beside PlanDefrag for a 7g.80gb on the
// same clusters as the baseline.
func BenchmarkPlanWholeDefrag(b *testing.B) {
	pending, _ := H100_80GB.Profile("7g.80gb")
	rng := rand.New(rand.NewPCG(5000, 8))
	sc := benchScenarios(func() ([]Node, MovableFunc) {
		nodes, mov := benchCluster(rng, 5000, pending, 0.9, 0)
		for n := range nodes {
			for g := range nodes[n].GPUs {
				nodes[n].GPUs[g].Switchable = true
			}
		}
		return nodes, mov
	})
	req := MustRequest(RequestItem{Profile: "7g.80gb", Count: 1})
	for _, bc := range []struct {
		name string
		plan func(s benchScenario) DefragResult
	}{
		{"baseline-7g.80gb-slice", func(s benchScenario) DefragResult { return PlanDefrag(s.nodes, req, s.movable, DefragOptions{}) }},
		{"whole-1", func(s benchScenario) DefragResult { return PlanWholeDefrag(s.nodes, 1, s.movable, DefragOptions{}) }},
		{"whole-2", func(s benchScenario) DefragResult { return PlanWholeDefrag(s.nodes, 2, s.movable, DefragOptions{}) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			moves, planned := 0, 0
			for i := 0; b.Loop(); i++ {
				res := bc.plan(sc[i%len(sc)])
				if res.Outcome == DefragPlanned {
					planned++
					moves += len(res.Plan.Moves)
				}
			}
			if planned > 0 {
				b.ReportMetric(float64(moves)/float64(planned), "moves/plan")
			}
		})
	}
}

func TestInstanceCountIsInstances(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	nodes, _ := randomCluster(rng, []Model{H100_80GB, A30_24GB, A100_40GB}, 50, 8, 0)
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if got, want := g.State.InstanceCount(), len(g.State.Instances()); got != want {
				t.Fatalf("InstanceCount %d, Instances %d (%s)", got, want, g.State)
			}
		}
	}
	if (GPUState{}).InstanceCount() != 0 {
		t.Error("the zero state counts instances")
	}
}
