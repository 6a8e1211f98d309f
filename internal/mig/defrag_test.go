package mig

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

type sliceKey struct {
	node, gpu, start int
}

// caseModels is the GPU model of a random test's case c: every fourth an A30, else an H100.
func caseModels(c int) []Model {
	if c%4 == 3 {
		return []Model{A30_24GB}
	}
	return []Model{H100_80GB}
}

// sortedSliceKeys lists the set's keys by node, GPU and start: a test that draws random
// numbers per key draws the same cases each run (a map's order changes between runs).
func sortedSliceKeys(set map[sliceKey]bool) []sliceKey {
	keys := make([]sliceKey, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b sliceKey) int {
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.start, b.start))
	})
	return keys
}

// movableSet is a MovableFunc over an explicit set of slices.
func movableSet(set map[sliceKey]bool) MovableFunc {
	return func(node, gpu int, _ Profile, pl Placement) bool { return set[sliceKey{node, gpu, pl.Start}] }
}

func memMask(pl Placement) uint16 { return uint16((1<<pl.Size)-1) << pl.Start }

func usedMask(s GPUState) uint16 {
	var m uint16
	for _, in := range s.Instances() {
		m |= memMask(in.Placement)
	}
	return m
}

// gpuAt is a GPU by node and GPU index.
type gpuAt struct{ n, g int }

// usableGPUs lists the usable GPUs of nodes in node then GPU order.
func usableGPUs(nodes []Node) []gpuAt {
	var out []gpuAt
	for n, node := range nodes {
		for g, gpu := range node.GPUs {
			if gpu.Usable {
				out = append(out, gpuAt{n, g})
			}
		}
	}
	return out
}

// stateCopy is the GPUs' states per node, for a test to change.
func stateCopy(nodes []Node) [][]GPUState {
	states := make([][]GPUState, len(nodes))
	for n := range nodes {
		for _, g := range nodes[n].GPUs {
			states[n] = append(states[n], g.State)
		}
	}
	return states
}

// bruteDefrag is the oracle: the fewest moves (up to maxMoves) of movable slices, from any GPUs,
// re-created at placements that overlap no current instance, after which the request's slice
// has a legal placement; -1 when there is none. It enumerates every subset of the movable
// slices, every target placement and every joint destination on the nodes allowed lets the
// slice go to (nil: any). A destination must be legal with the GPU's instances as they are now
// (its own moved slices still there) except on the target GPU: every destination is held before
// anything is evicted, so a slice leaving another GPU frees nothing there for the plan (not
// even a media-extension slot: two slices cannot swap GPUs).
func bruteDefrag(nodes []Node, req *Request, movable map[sliceKey]bool, allowed func(from sliceKey, node int) bool, maxMoves int) int {
	type slice struct {
		node, gpu int
		p         Profile
		pl        Placement
	}
	var all []slice
	for n, node := range nodes {
		for g, gpu := range node.GPUs {
			if !gpu.Usable {
				continue
			}
			for _, in := range gpu.State.Instances() {
				if movable[sliceKey{n, g, in.Placement.Start}] {
					p, _ := gpu.State.Model().Profile(in.Profile)
					all = append(all, slice{n, g, p, in.Placement})
				}
			}
		}
	}
	gpus := usableGPUs(nodes)
	states := map[gpuAt]GPUState{}
	var dests func(sub []slice, i int) bool
	dests = func(sub []slice, i int) bool {
		if i == len(sub) {
			return true
		}
		for _, h := range gpus {
			st := states[h]
			if st.Model() != sub[i].p.Model {
				continue
			}
			if allowed != nil && !allowed(sliceKey{sub[i].node, sub[i].gpu, sub[i].pl.Start}, h.n) {
				continue
			}
			for _, pl := range sub[i].p.Placements() {
				if memMask(pl)&usedMask(nodes[h.n].GPUs[h.g].State) != 0 {
					continue
				}
				next, err := st.Take(sub[i].p, pl)
				if err != nil {
					continue
				}
				states[h] = next
				ok := dests(sub, i+1)
				states[h] = st
				if ok {
					return true
				}
			}
		}
		return false
	}
	var pick []slice
	var choose func(start, size int) bool
	choose = func(start, size int) bool {
		if len(pick) == size {
			for _, h := range gpus {
				states[h] = nodes[h.n].GPUs[h.g].State
			}
			released := map[gpuAt]GPUState{}
			for _, h := range gpus {
				released[h] = nodes[h.n].GPUs[h.g].State
			}
			for _, s := range pick {
				r := gpuAt{s.node, s.gpu}
				next, err := released[r].Release(s.p, s.pl)
				if err != nil {
					panic(err)
				}
				released[r] = next
			}
			for _, h := range gpus {
				st := released[h]
				p, ok := req.Profile(0, st.Model())
				if !ok {
					continue
				}
				for _, pl := range st.Candidates(p) {
					next, _ := st.Take(p, pl)
					states[h] = next
					ok := dests(pick, 0)
					states[h] = nodes[h.n].GPUs[h.g].State
					if ok {
						return true
					}
				}
			}
			return false
		}
		for i := start; i < len(all); i++ {
			pick = append(pick, all[i])
			ok := choose(i+1, size)
			pick = pick[:len(pick)-1]
			if ok {
				return true
			}
		}
		return false
	}
	for size := 1; size <= maxMoves; size++ {
		if choose(0, size) {
			return size
		}
	}
	return -1
}

// checkPlan applies the plan on copies of the states and fails the test unless every move
// takes an existing movable slice to a placement that overlapped no instance, all legal
// together with the request's slice at its target.
func checkPlan(t *testing.T, nodes []Node, req *Request, movable map[sliceKey]bool, plan DefragPlan) {
	t.Helper()
	carryOut(t, nodes, req, movable, plan, true)
}

// carryOut is checkPlan; without freeNow a destination may overlap a moved slice's old place
// (an Ordered plan: every moved slice is released before any is re-created).
func carryOut(t *testing.T, nodes []Node, req *Request, movable map[sliceKey]bool, plan DefragPlan, freeNow bool) {
	t.Helper()
	states := stateCopy(nodes)
	for _, mv := range plan.Moves {
		f := mv.From
		if !movable[sliceKey{f.Node, f.GPU, f.Placement.Start}] {
			t.Fatalf("moves %v, which is not movable", f)
		}
		next, err := states[f.Node][f.GPU].Release(f.Profile, f.Placement)
		if err != nil {
			t.Fatalf("move from %v: %v", f, err)
		}
		states[f.Node][f.GPU] = next
	}
	tg := plan.Target
	if p, ok := req.Profile(0, nodes[tg.Node].GPUs[tg.GPU].State.Model()); !ok || p.Name != tg.Profile.Name || !nodes[tg.Node].GPUs[tg.GPU].Usable {
		t.Fatalf("target %v is not the request's profile on a usable GPU", tg)
	}
	next, err := states[tg.Node][tg.GPU].Take(tg.Profile, tg.Placement)
	if err != nil {
		t.Fatalf("target %v: %v", tg, err)
	}
	states[tg.Node][tg.GPU] = next
	for _, mv := range plan.Moves {
		to := mv.To
		if to.Profile.Name != mv.From.Profile.Name || !nodes[to.Node].GPUs[to.GPU].Usable {
			t.Fatalf("move %v -> %v changes the profile or lands on an unusable GPU", mv.From, to)
		}
		if freeNow && memMask(to.Placement)&usedMask(nodes[to.Node].GPUs[to.GPU].State) != 0 {
			t.Fatalf("move %v -> %v: the destination is not free now", mv.From, to)
		}
		next, err := states[to.Node][to.GPU].Take(to.Profile, to.Placement)
		if err != nil {
			t.Fatalf("move %v -> %v: %v", mv.From, to, err)
		}
		states[to.Node][to.GPU] = next
	}
}

// randomCluster fills GPUs with random instances; each is movable with probability pMove.
func randomCluster(rng *rand.Rand, models []Model, nodes, gpus int, pMove float64) ([]Node, map[sliceKey]bool) {
	out := make([]Node, nodes)
	movable := map[sliceKey]bool{}
	for n := range out {
		for g := 0; g < gpus; g++ {
			m := models[rng.IntN(len(models))]
			st := EmptyGPU(m)
			profs := m.Profiles()
			for i := rng.IntN(9); i > 0; i-- {
				p := profs[rng.IntN(len(profs))]
				if c := st.Candidates(p); len(c) > 0 {
					pl := c[rng.IntN(len(c))]
					st, _ = st.Take(p, pl)
					if rng.Float64() < pMove {
						movable[sliceKey{n, g, pl.Start}] = true
					}
				}
			}
			out[n].GPUs = append(out[n].GPUs, GPU{State: st, Usable: rng.IntN(10) > 0})
		}
	}
	return out, movable
}

func TestPlanDefragAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 1))
	const maxMoves = 3
	count := map[DefragOutcome]int{}
	byMoves := map[int]int{}
	for c := 0; c < 3000; c++ {
		models := []Model{H100_80GB}
		switch c % 5 {
		case 3:
			models = []Model{A30_24GB}
		case 4:
			models = []Model{H100_80GB, A100_40GB}
		}
		nodes, movable := randomCluster(rng, models, 1+rng.IntN(2), 1+rng.IntN(3), 0.75)
		m := models[rng.IntN(len(models))]
		profs := m.Profiles()
		req := MustRequest(RequestItem{Profile: profs[rng.IntN(len(profs))].Name, Count: 1})
		res := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{MaxMoves: maxMoves})
		count[res.Outcome]++
		if res.Bounded {
			t.Fatalf("case %d: the work bound was reached on a small cluster", c)
		}
		fitsNow := false
		for _, n := range nodes {
			if _, ok := Score(n, req); ok {
				fitsNow = true
			}
		}
		if (res.Outcome == DefragFitsNow) != fitsNow {
			t.Fatalf("case %d: outcome %s, but fits now = %v", c, res.Outcome, fitsNow)
		}
		if fitsNow {
			continue
		}
		want := bruteDefrag(nodes, req, movable, nil, maxMoves)
		switch res.Outcome {
		case DefragPlanned:
			checkPlan(t, nodes, req, movable, res.Plan)
			if len(res.Plan.Moves) != want {
				t.Fatalf("case %d (%s on %v): plan has %d moves, brute force %d:\n%+v", c, req.Slices()[0], nodes, len(res.Plan.Moves), want, res.Plan)
			}
			byMoves[want]++
		case DefragNoPlan, DefragNoCapacity:
			if want != -1 {
				t.Fatalf("case %d (%s on %v): %s, brute force finds %d moves", c, req.Slices()[0], nodes, res.Outcome, want)
			}
		default:
			t.Fatalf("case %d: outcome %s", c, res.Outcome)
		}
	}
	t.Logf("outcomes %v, plans by moves %v", count, byMoves)
	if byMoves[1] == 0 || byMoves[2] == 0 || byMoves[3] == 0 || count[DefragNoPlan] == 0 || count[DefragNoCapacity] == 0 {
		t.Errorf("the random cases miss an outcome: %v, plans by moves %v", count, byMoves)
	}
}

// On clusters too large for the oracle: every plan is legal, no plan exists with one move
// fewer, and the same input gives the same plan.
func TestPlanDefragLargerClusters(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 2))
	planned := 0
	for c := 0; c < 1000; c++ {
		nodes, movable := randomCluster(rng, []Model{H100_80GB}, 3, 4, 0.6)
		large := []string{"3g.40gb", "4g.40gb", "7g.80gb"}
		req := MustRequest(RequestItem{Profile: large[rng.IntN(len(large))], Count: 1})
		opt := DefragOptions{MaxMoves: 1 + rng.IntN(MaxDefragMoves)}
		res := PlanDefrag(nodes, req, movableSet(movable), opt)
		if res.Outcome != DefragPlanned {
			continue
		}
		planned++
		checkPlan(t, nodes, req, movable, res.Plan)
		k := len(res.Plan.Moves)
		if k < 1 || k > opt.MaxMoves || res.Bounded {
			t.Fatalf("case %d: %d moves with MaxMoves %d, bounded %v", c, k, opt.MaxMoves, res.Bounded)
		}
		if k > 1 {
			if fewer := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{MaxMoves: k - 1}); fewer.Outcome != DefragNoPlan {
				t.Fatalf("case %d: %d moves, but MaxMoves %d gives %s", c, k, k-1, fewer.Outcome)
			}
		}
		again := PlanDefrag(nodes, req, movableSet(movable), opt)
		if fmt.Sprint(again) != fmt.Sprint(res) {
			t.Fatalf("case %d: two calls, two answers:\n%+v\n%+v", c, res, again)
		}
	}
	if planned < 50 {
		t.Errorf("only %d of 1000 cases planned", planned)
	}
	t.Logf("%d of 1000 cases planned", planned)
}

func h100(t testing.TB, ins ...Instance) GPU {
	t.Helper()
	s, err := NewGPUState(H100_80GB, ins)
	if err != nil {
		t.Fatal(err)
	}
	return GPU{State: s, Usable: true}
}

func TestPlanDefragExamples(t *testing.T) {
	one := func(start int) Instance { return Instance{"1g.10gb", Placement{start, 1}} }
	all := func(int, int, Profile, Placement) bool { return true }
	req7 := MustRequest(RequestItem{Profile: "7g.80gb", Count: 1})
	req4 := MustRequest(RequestItem{Profile: "4g.40gb", Count: 1})

	t.Run("two GPUs each blocked by one 1g: one move", func(t *testing.T) {
		nodes := []Node{{GPUs: []GPU{h100(t, one(0)), h100(t, one(3))}}}
		res := PlanDefrag(nodes, req7, all, DefragOptions{})
		if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 1 {
			t.Fatalf("got %+v", res)
		}
		mv := res.Plan.Moves[0]
		if mv.To.GPU == mv.From.GPU || res.Plan.Target.GPU != mv.From.GPU {
			t.Errorf("the 1g should move to the other GPU and the 7g take its GPU: %+v", res.Plan)
		}
		checkPlan(t, nodes, req7, map[sliceKey]bool{{0, 0, 0}: true, {0, 1, 3}: true}, res.Plan)
	})
	t.Run("the same GPU at another placement", func(t *testing.T) {
		nodes := []Node{{GPUs: []GPU{h100(t, one(2), Instance{"2g.20gb", Placement{4, 2}})}}}
		movable := map[sliceKey]bool{{0, 0, 2}: true}
		res := PlanDefrag(nodes, req4, movableSet(movable), DefragOptions{})
		if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 1 {
			t.Fatalf("got %+v", res)
		}
		if to := res.Plan.Moves[0].To; to.GPU != 0 || to.Placement.Start != 6 {
			t.Errorf("the 1g should go to slice 6 of the same GPU: %+v", res.Plan)
		}
		checkPlan(t, nodes, req4, movable, res.Plan)
	})
	t.Run("nothing movable", func(t *testing.T) {
		nodes := []Node{{GPUs: []GPU{h100(t, one(0)), h100(t, one(3))}}}
		if res := PlanDefrag(nodes, req7, nil, DefragOptions{}); res.Outcome != DefragNoPlan || res.Bounded {
			t.Errorf("got %+v", res)
		}
	})
	t.Run("two moves, and not with a bound of one", func(t *testing.T) {
		nodes := []Node{{GPUs: []GPU{h100(t, one(0), one(4)), h100(t, one(0), one(1), Instance{"3g.40gb", Placement{4, 4}})}}}
		res := PlanDefrag(nodes, req7, all, DefragOptions{})
		if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 2 || res.Plan.Target.GPU != 0 {
			t.Fatalf("got %+v", res)
		}
		if res := PlanDefrag(nodes, req7, all, DefragOptions{MaxMoves: 1}); res.Outcome != DefragNoPlan {
			t.Errorf("MaxMoves 1: got %+v", res)
		}
	})
	t.Run("fits now, no capacity, several slices", func(t *testing.T) {
		nodes := []Node{{GPUs: []GPU{h100(t, one(0)), h100(t)}}}
		if res := PlanDefrag(nodes, req7, all, DefragOptions{}); res.Outcome != DefragFitsNow {
			t.Errorf("fits now: got %+v", res)
		}
		// 2 + 2 free compute slices: no 7g however the slices move.
		full := []Node{{GPUs: []GPU{h100(t, Instance{"4g.40gb", Placement{0, 4}}, one(4)), h100(t, Instance{"4g.40gb", Placement{0, 4}}, one(4))}}}
		if res := PlanDefrag(full, req7, all, DefragOptions{}); res.Outcome != DefragNoCapacity {
			t.Errorf("no capacity: got %+v", res)
		}
		two := MustRequest(RequestItem{Profile: "3g.40gb", Count: 2})
		if res := PlanDefrag(nodes, two, all, DefragOptions{}); res.Outcome != DefragUnsupported {
			t.Errorf("two slices: got %+v", res)
		}
	})
	t.Run("the work bound", func(t *testing.T) {
		// GPUs 0 and 1 each open a 4g by moving their 1g; GPU 2 is full.
		three := Instance{"3g.40gb", Placement{4, 4}}
		nodes := []Node{{GPUs: []GPU{h100(t, one(0), three), h100(t, one(0), three), h100(t, Instance{"7g.80gb", Placement{0, 8}})}}}
		movable := map[sliceKey]bool{{0, 0, 0}: true, {0, 1, 0}: true}
		res := PlanDefrag(nodes, req4, movableSet(movable), DefragOptions{})
		if res.Outcome != DefragPlanned || res.Bounded || res.RemovalSets != 2 {
			t.Errorf("unbounded: got %+v", res)
		}
		res = PlanDefrag(nodes, req4, movableSet(movable), DefragOptions{MaxRemovalSets: 1})
		if res.Outcome != DefragPlanned || !res.Bounded || res.RemovalSets != 1 || len(res.Plan.Moves) != 1 {
			t.Errorf("bound 1: got %+v", res)
		}
		checkPlan(t, nodes, req4, movable, res.Plan)
		if res := PlanDefrag(nodes, req7, movableSet(movable), DefragOptions{MaxRemovalSets: 1}); res.Outcome != DefragNoCapacity {
			t.Errorf("7g: got %+v", res)
		}
	})
	t.Run("a scarce destination is shared by two moved slices", func(t *testing.T) {
		// GPU 0 holds two 1g that block the 7g; the only room elsewhere is two slices of GPU 1.
		nodes := []Node{{GPUs: []GPU{
			h100(t, one(0), one(4)),
			h100(t, Instance{"4g.40gb", Placement{0, 4}}, Instance{"1g.10gb", Placement{4, 1}}),
		}}}
		movable := map[sliceKey]bool{{0, 0, 0}: true, {0, 0, 4}: true}
		res := PlanDefrag(nodes, req7, movableSet(movable), DefragOptions{})
		if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 2 {
			t.Fatalf("got %+v", res)
		}
		checkPlan(t, nodes, req7, movable, res.Plan)
	})
}

// benchCluster is nodes × 8 H100 GPUs filled at random with the mixed trace's profiles, then
// with 1g slices until the pending profile fits on no GPU. Each slice is movable with
// probability pMove; movability is a bit per (GPU, start), as a scheduler snapshot would keep
// it, so the callback costs what a real one would. With crowd > 0 each GPU is then, with that
// probability, filled up with 1g slices until not even a 1g.10gb fits (a crowded cluster, whose
// free room is on the other GPUs only); crowd 0 draws nothing more from rng.
func benchCluster(rng *rand.Rand, nodes int, pending Profile, pMove, crowd float64) ([]Node, MovableFunc) {
	weights := []struct {
		name string
		w    float64
	}{{"1g.10gb", 0.3}, {"1g.20gb", 0.1}, {"2g.20gb", 0.2}, {"3g.40gb", 0.2}, {"4g.40gb", 0.1}, {"7g.80gb", 0.1}}
	var profs []Profile
	var cum []float64
	total := 0.0
	for _, w := range weights {
		p, _ := H100_80GB.Profile(w.name)
		total += w.w
		profs, cum = append(profs, p), append(cum, total)
	}
	one, _ := H100_80GB.Profile("1g.10gb")
	out := make([]Node, nodes)
	bitsOf := make([]uint8, nodes*8)
	for n := range out {
		out[n].GPUs = make([]GPU, 8)
		for g := range out[n].GPUs {
			st := EmptyGPU(H100_80GB)
			take := func(p Profile) {
				if c := st.Candidates(p); len(c) > 0 {
					pl := c[rng.IntN(len(c))]
					st, _ = st.Take(p, pl)
					if rng.Float64() < pMove {
						bitsOf[n*8+g] |= 1 << pl.Start
					}
				}
			}
			for target := 2 + rng.IntN(5); st.UsedComputeSlices() < target; {
				u := rng.Float64() * total
				i := sort.SearchFloat64s(cum, u)
				before := st
				take(profs[min(i, len(profs)-1)])
				if st == before {
					break
				}
			}
			for st.Fits(pending) {
				take(one)
			}
			if crowd > 0 && rng.Float64() < crowd {
				for st.Fits(one) {
					take(one)
				}
			}
			out[n].GPUs[g] = GPU{State: st, Usable: true}
		}
	}
	return out, func(n, g int, _ Profile, pl Placement) bool { return bitsOf[n*8+g]&(1<<pl.Start) != 0 }
}

// benchScenario is one cluster a planner benchmark plans on, and its movability.
type benchScenario struct {
	nodes   []Node
	movable MovableFunc
}

// benchScenarios builds the four clusters a planner benchmark cycles through.
func benchScenarios(build func() ([]Node, MovableFunc)) []benchScenario {
	var sc []benchScenario
	for i := 0; i < 4; i++ {
		nodes, mov := build()
		sc = append(sc, benchScenario{nodes, mov})
	}
	return sc
}

// BenchmarkPlanDefrag plans for a pending 7g, 4g or 3g on fragmented clusters of 5,000 nodes ×
// 8 H100 (40,000 GPUs, none of which fits the pending profile) and reports the latency
// percentiles of one PlanDefrag call (default bounds: 2 moves, 32,768 removal sets), the mean
// moves of the plans and the share of calls that found one. cpu-p50/p99 are the same calls'
// CPU time on their thread, which a shared machine does not inflate. "none-movable" is the worst case:
// no plan, every level searched to the end. "even-nodes" restricts every moved slice to the
// even nodes (DefragOptions.Destinations, as a zone selector would), "pinned" to its own node
// (as a nodeSelector on the hostname would): each restricted slice's allowed GPUs are counted.
func BenchmarkPlanDefrag(b *testing.B) {
	evenNodes := func(SliceAt) func(int) bool { return func(n int) bool { return n%2 == 0 } }
	pinned := func(from SliceAt) func(int) bool { return func(n int) bool { return n == from.Node } }
	cases := []struct {
		name    string
		profile string
		pMove   float64
		dest    DestinationFunc
	}{
		{"7g.80gb", "7g.80gb", 0.9, nil}, {"4g.40gb", "4g.40gb", 0.9, nil}, {"3g.40gb", "3g.40gb", 0.9, nil},
		{"4g.40gb/half-movable", "4g.40gb", 0.5, nil}, {"7g.80gb/none-movable", "7g.80gb", 0, nil},
		{"7g.80gb/even-nodes", "7g.80gb", 0.9, evenNodes}, {"7g.80gb/pinned", "7g.80gb", 0.9, pinned},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			pending, _ := H100_80GB.Profile(bc.profile)
			req := MustRequest(RequestItem{Profile: bc.profile, Count: 1})
			rng := rand.New(rand.NewPCG(5000, 8))
			sc := benchScenarios(func() ([]Node, MovableFunc) { return benchCluster(rng, 5000, pending, bc.pMove, 0) })
			results := benchPlans(b, func(i int, noPrune bool) DefragResult {
				s := sc[i%len(sc)]
				return planDefrag(s.nodes, req, s.movable, DefragOptions{Destinations: bc.dest}, noPrune)
			})
			moves, planned := 0, 0
			for _, res := range results {
				if res.Outcome == DefragPlanned {
					planned++
					moves += len(res.Plan.Moves)
				}
			}
			if planned > 0 {
				b.ReportMetric(float64(moves)/float64(planned), "moves/plan")
			}
			b.ReportMetric(float64(planned)/float64(b.N), "planned")
		})
	}
}

func ExamplePlanDefrag() {
	one := Instance{Profile: "1g.10gb", Placement: Placement{Start: 0, Size: 1}}
	a, _ := NewGPUState(H100_80GB, []Instance{one})
	b, _ := NewGPUState(H100_80GB, []Instance{one})
	nodes := []Node{{GPUs: []GPU{{State: a, Usable: true}}}, {GPUs: []GPU{{State: b, Usable: true}}}}
	req := MustRequest(RequestItem{Profile: "7g.80gb", Count: 1})
	res := PlanDefrag(nodes, req, func(int, int, Profile, Placement) bool { return true }, DefragOptions{})
	for _, mv := range res.Plan.Moves {
		fmt.Printf("move %s@%d from node %d GPU %d to node %d GPU %d @%d\n", mv.From.Profile.Name, mv.From.Placement.Start,
			mv.From.Node, mv.From.GPU, mv.To.Node, mv.To.GPU, mv.To.Placement.Start)
	}
	fmt.Printf("%s: %s on node %d GPU %d @%d\n", res.Outcome, res.Plan.Target.Profile.Name, res.Plan.Target.Node, res.Plan.Target.GPU, res.Plan.Target.Placement.Start)
	// Output:
	// move 1g.10gb@0 from node 0 GPU 0 to node 1 GPU 0 @1
	// Planned: 7g.80gb on node 0 GPU 0 @0
}
