package mig

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"testing"
	"time"
)

// The pruning rules (defragRun.stuck, defragRun.stateOpens) change no answer: on random
// clusters, nearly full ones and ones of many GPUs alike included, with and without
// destinations, PlanDefrag gives what the search without them gives, examining no
// more removal sets, and fewer on some.
func TestPlanDefragPruneChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 6))
	pruned, bounded := 0, 0
	for c := 0; c < 3000; c++ {
		models := caseModels(c)
		nodes, movable := randomCluster(rng, models, 1+rng.IntN(4), 1+rng.IntN(4), 0.8)
		if c%2 == 0 {
			alike(rng, nodes, movable)
		}
		profs := models[0].Profiles()
		req := MustRequest(RequestItem{Profile: profs[rng.IntN(len(profs))].Name, Count: 1})
		opt := DefragOptions{MaxMoves: 1 + rng.IntN(MaxDefragMoves)}
		if c%3 == 1 {
			allowed := func(from SliceAt) func(int) bool {
				return func(n int) bool { return (n+from.GPU)%2 == 0 }
			}
			opt.Destinations = allowed
		}
		if c%7 == 0 {
			opt.MaxRemovalSets = 1 + rng.IntN(8)
		}
		res := PlanDefrag(nodes, req, movableSet(movable), opt)
		old := planDefrag(nodes, req, movableSet(movable), opt, true)
		if res.RemovalSets > old.RemovalSets {
			t.Fatalf("case %d: %d removal sets with the rule, %d without", c, res.RemovalSets, old.RemovalSets)
		}
		if res.RemovalSets < old.RemovalSets {
			pruned++
		}
		if old.Bounded {
			// The bound cuts the unpruned search earlier: the rule may only find more.
			bounded++
			if old.Outcome == DefragPlanned && len(res.Plan.Moves) > len(old.Plan.Moves) {
				t.Fatalf("case %d: %d moves with the rule, %d without", c, len(res.Plan.Moves), len(old.Plan.Moves))
			}
			continue
		}
		res.RemovalSets, old.RemovalSets = 0, 0
		if fmt.Sprint(res) != fmt.Sprint(old) {
			t.Fatalf("case %d (%s on %v, %+v):\nwith the rule    %+v\nwithout the rule %+v", c, req.Slices()[0], nodes, opt, res, old)
		}
	}
	t.Logf("%d of 3000 cases examined fewer removal sets, %d bounded without the rule", pruned, bounded)
	if pruned < 100 || bounded == 0 {
		t.Errorf("the rule pruned %d cases, %d bounded: the cases do not exercise it", pruned, bounded)
	}
}

// alike makes most GPUs copies of the first two (their slices movable at random), so that many
// GPUs share a state.
func alike(rng *rand.Rand, nodes []Node, movable map[sliceKey]bool) {
	var src []GPU
	for n := range nodes {
		for g := range nodes[n].GPUs {
			if len(src) < 2 {
				src = append(src, nodes[n].GPUs[g])
				continue
			}
			if rng.IntN(4) == 0 {
				continue
			}
			nodes[n].GPUs[g] = src[rng.IntN(len(src))]
			for _, in := range nodes[n].GPUs[g].State.Instances() {
				movable[sliceKey{n, g, in.Placement.Start}] = rng.IntN(5) > 0
			}
		}
	}
}

// The shape of BenchmarkPlanDefragAdversarial's "none" case: every other GPU opens the 7g.80gb with
// two removals, but its 4g.40gb fits on no other GPU and on no free room of its own, so the
// rule examines no removal set at two moves.
func TestPlanDefragPruneStuckSlices(t *testing.T) {
	other := h100(t, Instance{"4g.40gb", Placement{0, 4}}, Instance{"2g.20gb", Placement{4, 2}})
	nodes := []Node{{GPUs: []GPU{h100(t, Instance{"2g.20gb", Placement{0, 2}}), other, other}}}
	req := MustRequest(RequestItem{Profile: "7g.80gb", Count: 1})
	all := func(int, int, Profile, Placement) bool { return true }
	res := PlanDefrag(nodes, req, all, DefragOptions{})
	old := planDefrag(nodes, req, all, DefragOptions{}, true)
	if res.Outcome != DefragNoPlan || old.Outcome != DefragNoPlan {
		t.Fatalf("outcomes %s, %s; want NoPlan", res.Outcome, old.Outcome)
	}
	// One removal set at one move (the 2g.20gb of GPU 0) either way; at two moves, one per
	// other GPU without the rule, none with it.
	if res.RemovalSets != 1 || old.RemovalSets != 3 {
		t.Fatalf("%d removal sets with the rule, %d without; want 1, 3", res.RemovalSets, old.RemovalSets)
	}
}

// The shape of BenchmarkPlanDefragAdversarial's "crowded" case: the others' 4g.40gb and 2g.20gb may
// each go to GPU 0 (no slice is stuck) but not both, so no removal set of the others' state is
// feasible, which stateOpens finds once for all four.
func TestPlanDefragPruneAlikeGPUs(t *testing.T) {
	other := h100(t, Instance{"4g.40gb", Placement{0, 4}}, Instance{"2g.20gb", Placement{4, 2}})
	nodes := []Node{{GPUs: []GPU{h100(t, Instance{"3g.40gb", Placement{4, 4}}), other, other, other, other}}}
	req := MustRequest(RequestItem{Profile: "7g.80gb", Count: 1})
	all := func(int, int, Profile, Placement) bool { return true }
	res := PlanDefrag(nodes, req, all, DefragOptions{})
	old := planDefrag(nodes, req, all, DefragOptions{}, true)
	if res.Outcome != DefragNoPlan || old.Outcome != DefragNoPlan {
		t.Fatalf("outcomes %s, %s; want NoPlan", res.Outcome, old.Outcome)
	}
	// One removal set at one move (GPU 0's 3g.40gb) either way; at two moves, one per other GPU
	// without the rule, none with it.
	if res.RemovalSets != 1 || old.RemovalSets != 5 {
		t.Fatalf("%d removal sets with the rule, %d without; want 1, 5", res.RemovalSets, old.RemovalSets)
	}
}

// planDefrag is PlanDefrag with every exact pruning rule turned off (noPrune), which must not
// change any answer, for the tests and benchmarks that compare the two.
func planDefrag(nodes []Node, req *Request, movable MovableFunc, opt DefragOptions, noPrune bool) DefragResult {
	return planDefragRules(nodes, req, movable, opt, noPrune, noPrune)
}

// planDefragRules is planDefrag with the opening-set rule (defrag_open.go) turned off on its
// own by noOpen, for the tests and benchmarks that compare the search with and without it.
func planDefragRules(nodes []Node, req *Request, movable MovableFunc, opt DefragOptions, noPrune, noOpen bool) DefragResult {
	if req == nil || req.n != 1 {
		return DefragResult{Outcome: DefragUnsupported}
	}
	r := newDefragRun(nodes, req, movable, opt)
	r.noPrune, r.noOpen = noPrune, noOpen
	return r.plan(opt)
}

// benchPlans calls plan(i, false), the planner as it is, and plan(i, true), the search without
// the stuck-slice rule, alternately on the benchmark's locked thread, so both see the same
// machine, and reports the first's wall and thread-CPU percentiles, the second's CPU
// percentiles (old-cpu-*) and the ratio of their CPU p99s. Where neither was stopped by the
// work bound, the two must agree. It returns the first's results. DEFRAG_BENCH_NO_OLD=1 leaves
// the second out (for a CPU profile of the first alone).
func benchPlans(b *testing.B, plan func(i int, noPrune bool) DefragResult) []DefragResult {
	noOld := os.Getenv("DEFRAG_BENCH_NO_OLD") == "1"
	lat := make([]time.Duration, 0, b.N)
	cpu := make([]time.Duration, 0, b.N)
	oldCPU := make([]time.Duration, 0, b.N)
	out := make([]DefragResult, 0, b.N)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0, t0 := threadCPU(), time.Now()
		res := plan(i, false)
		lat = append(lat, time.Since(t0))
		cpu = append(cpu, threadCPU()-c0)
		if noOld {
			out = append(out, res)
			continue
		}
		c0 = threadCPU()
		old := plan(i, true)
		oldCPU = append(oldCPU, threadCPU()-c0)
		if !old.Bounded && !res.Bounded && (res.Outcome != old.Outcome || len(res.Plan.Moves) != len(old.Plan.Moves)) {
			b.Fatalf("call %d: %s with %d moves, %s with %d without the rule", i, res.Outcome, len(res.Plan.Moves), old.Outcome, len(old.Plan.Moves))
		}
		out = append(out, res)
	}
	b.StopTimer()
	pct := func(d []time.Duration, q float64) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[min(int(q*float64(len(d))), len(d)-1)].Microseconds())
	}
	b.ReportMetric(pct(lat, 0.5), "p50-µs")
	b.ReportMetric(pct(lat, 0.99), "p99-µs")
	b.ReportMetric(pct(cpu, 0.5), "cpu-p50-µs")
	b.ReportMetric(pct(cpu, 0.99), "cpu-p99-µs")
	if noOld {
		return out
	}
	b.ReportMetric(pct(oldCPU, 0.5), "old-cpu-p50-µs")
	b.ReportMetric(pct(oldCPU, 0.99), "old-cpu-p99-µs")
	if p := pct(cpu, 0.99); p > 0 {
		b.ReportMetric(pct(oldCPU, 0.99)/p, "old/new-cpu-p99")
	}
	return out
}

// BenchmarkPlanDefragAdversarial: 5,000 nodes × 8 H100; one GPU holds a movable 2g.20gb that
// blocks a pending 7g.80gb. "none": the 39,999 others are 4g.40gb@0 + 2g.20gb@4, room for a 1g
// only: each opens the 7g.80gb with two removals, but its 4g.40gb has nowhere to go, so no
// plan. "crowded": the others as in "none", the one GPU a 3g.40gb@4: the others' 4g.40gb and
// 2g.20gb can only go there, not both, and its 3g.40gb nowhere (no plan either). Both levels
// are searched to the end; benchPlans' old-cpu-* is the search without the pruning rules.
func BenchmarkPlanDefragAdversarial(b *testing.B) {
	for _, bc := range []struct {
		name   string
		target Instance
	}{
		{"none", Instance{"2g.20gb", Placement{0, 2}}},
		{"crowded", Instance{"3g.40gb", Placement{4, 4}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			other := h100(b, Instance{"4g.40gb", Placement{0, 4}}, Instance{"2g.20gb", Placement{4, 2}})
			nodes := make([]Node, 5000)
			for n := range nodes {
				nodes[n].GPUs = make([]GPU, 8)
				for g := range nodes[n].GPUs {
					nodes[n].GPUs[g] = other
				}
			}
			nodes[2500].GPUs[3] = h100(b, bc.target)
			req := MustRequest(RequestItem{Profile: "7g.80gb", Count: 1})
			all := func(int, int, Profile, Placement) bool { return true }
			for _, res := range benchPlans(b, func(_ int, noPrune bool) DefragResult {
				return planDefrag(nodes, req, all, DefragOptions{}, noPrune)
			}) {
				if res.Outcome != DefragNoPlan {
					b.Fatalf("%+v, want NoPlan", res)
				}
			}
		})
	}
}
