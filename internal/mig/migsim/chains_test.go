package migsim

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/slicer-operator/slicer/internal/mig"
)

// slot is a slice's place: node, GPU and start.
type slot struct{ node, gpu, start int }

// randomCluster fills nodes × gpus GPUs of the models with random instances; each is movable
// with probability pMove, and a GPU is unusable with probability 0.1.
func randomCluster(rng *rand.Rand, models []mig.Model, nodes, gpus int, pMove float64) ([]mig.Node, map[slot]bool) {
	out := make([]mig.Node, nodes)
	movable := map[slot]bool{}
	for n := range out {
		for g := 0; g < gpus; g++ {
			m := models[rng.IntN(len(models))]
			st := mig.EmptyGPU(m)
			profs := m.Profiles()
			for i := rng.IntN(9); i > 0; i-- {
				p := profs[rng.IntN(len(profs))]
				if c := st.Candidates(p); len(c) > 0 {
					pl := c[rng.IntN(len(c))]
					st, _ = st.Take(p, pl)
					if rng.Float64() < pMove {
						movable[slot{n, g, pl.Start}] = true
					}
				}
			}
			out[n].GPUs = append(out[n].GPUs, mig.GPU{State: st, Usable: rng.IntN(10) > 0})
		}
	}
	return out, movable
}

func movableSet(set map[slot]bool) mig.MovableFunc {
	return func(node, gpu int, _ mig.Profile, pl mig.Placement) bool { return set[slot{node, gpu, pl.Start}] }
}

// caseModels is the GPU models of random case c: every fourth an A30, else an H100.
func caseModels(c int) []mig.Model {
	if c%4 == 3 {
		return []mig.Model{mig.A30_24GB}
	}
	return []mig.Model{mig.H100_80GB}
}

// upperRequest is a one-slice request of a random profile from the upper half of m's table.
func upperRequest(rng *rand.Rand, m mig.Model) *mig.Request {
	profs := m.Profiles()
	pi := len(profs)/2 + rng.IntN(len(profs)-len(profs)/2)
	return mig.MustRequest(mig.RequestItem{Profile: profs[pi].Name, Count: 1})
}

func overlaps(a, b mig.Placement) bool {
	return a.Start < b.Start+b.Size && b.Start < a.Start+a.Size
}

// bruteChain is the chain oracle: whether some movable slice b on a GPU X other than the
// target can move to a place free now on a GPU other than the target (X itself included, legal
// with what follows), after which the target's movable slice a fits on X without b, after
// which the request fits on the target without a.
func bruteChain(nodes []mig.Node, req *mig.Request, movable map[slot]bool) bool {
	type gpuAt struct{ n, g int }
	var gpus []gpuAt
	for n, node := range nodes {
		for g, gpu := range node.GPUs {
			if gpu.Usable {
				gpus = append(gpus, gpuAt{n, g})
			}
		}
	}
	state := func(h gpuAt) mig.GPUState { return nodes[h.n].GPUs[h.g].State }
	for _, T := range gpus {
		m := state(T).Model()
		p, ok := req.Profile(0, m)
		if !ok {
			continue
		}
		for _, a := range state(T).Instances() {
			if !movable[slot{T.n, T.g, a.Placement.Start}] {
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
					if !movable[slot{X.n, X.g, b.Placement.Start}] {
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
									if !overlapsAny(state(X).Instances(), e) {
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
func checkChain(t *testing.T, nodes []mig.Node, req *mig.Request, movable map[slot]bool, plan mig.DefragPlan) {
	t.Helper()
	states := make([][]mig.GPUState, len(nodes))
	for n := range nodes {
		for _, g := range nodes[n].GPUs {
			states[n] = append(states[n], g.State)
		}
	}
	var gone []mig.SliceAt
	for _, mv := range plan.Moves {
		f, to := mv.From, mv.To
		if !movable[slot{f.Node, f.GPU, f.Placement.Start}] {
			t.Fatalf("moves %v, which is not movable", f)
		}
		next, err := states[f.Node][f.GPU].Release(f.Profile, f.Placement)
		if err != nil {
			t.Fatalf("move from %v: %v", f, err)
		}
		states[f.Node][f.GPU] = next
		gone = append(gone, f)
		for _, in := range nodes[to.Node].GPUs[to.GPU].State.Instances() {
			moved := slices.ContainsFunc(gone, func(g mig.SliceAt) bool {
				return g.Node == to.Node && g.GPU == to.GPU && g.Placement == in.Placement
			})
			if !moved && overlaps(in.Placement, to.Placement) {
				t.Fatalf("move %v -> %v: the destination overlaps %v, which stays", f, to, in)
			}
		}
		if to.Profile.Name != f.Profile.Name || !nodes[to.Node].GPUs[to.GPU].Usable {
			t.Fatalf("move %v -> %v: not the same profile on a usable GPU", f, to)
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

// With chains: the independent plans of mig.PlanDefrag (its own tests check them against brute
// force); where it has none of one or two moves, a chain exactly when the oracle finds one, and
// every chain replays legally in its order.
func TestPlanDefragChainsAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 4))
	count := map[string]int{}
	for c := 0; c < 5000; c++ {
		models := caseModels(c)
		nodes, movable := randomCluster(rng, models, 2+rng.IntN(2), 1+rng.IntN(2), 0.8)
		req := upperRequest(rng, models[0])
		res := PlanDefragChains(nodes, req, movableSet(movable), mig.DefragOptions{MaxMoves: 2})
		plain := mig.PlanDefrag(nodes, req, movableSet(movable), mig.DefragOptions{MaxMoves: 2})
		switch {
		case plain.Outcome != mig.DefragNoPlan:
			if res.Outcome != plain.Outcome || res.Plan.Ordered || len(res.Plan.Moves) != len(plain.Plan.Moves) {
				t.Fatalf("case %d (%s on %v): %+v without chains, got %+v", c, req.Slices()[0], nodes, plain, res)
			}
			count[string(plain.Outcome)]++
		case bruteChain(nodes, req, movable):
			if res.Outcome != mig.DefragPlanned || !res.Plan.Ordered || len(res.Plan.Moves) != 2 {
				t.Fatalf("case %d (%s on %v): the oracle finds a chain, got %+v", c, req.Slices()[0], nodes, res)
			}
			checkChain(t, nodes, req, movable, res.Plan)
			count["chain"]++
		default:
			if res.Outcome != mig.DefragNoPlan {
				t.Fatalf("case %d (%s on %v): no plan nor chain by brute force, got %+v", c, req.Slices()[0], nodes, res)
			}
			count["none"]++
		}
	}
	t.Logf("%v", count)
	if count["chain"] < 30 || count["none"] == 0 || count[string(mig.DefragPlanned)] == 0 {
		t.Errorf("the random cases miss an outcome: %v", count)
	}
}
