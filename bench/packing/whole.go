package main

import (
	"fmt"
	"math"
	"time"

	"github.com/slicer-operator/slicer/cmd/slicer-sim/sim"
)

// The whole section (-sections whole): traces that mix whole-GPU pods with slices on H100 80GB
// nodes, replayed on a cluster split into MIG nodes and whole-GPU nodes (the best split for
// each trace, chosen with hindsight), on one pool of switchable GPUs with the core's decisions,
// and on a pool without geometry; issue 40's goals printed against each row.

const (
	wholeNodes = 16
	// wholeSliceLifetime and wholePodLifetime are the classes' mean durations in trace units
	// (one unit: -lifetime, an hour by default).
	wholeSliceLifetime = 1.0
	wholePodLifetime   = 4.0
	wholePhase         = 1000 // arrivals per phase of a shifting mix
)

// wholeSlices is the slice mix of every whole trace (the online section's "mixed").
var wholeSlices = []sim.SliceShare{
	{Profile: "1g.10gb", Share: 0.30}, {Profile: "1g.20gb", Share: 0.10}, {Profile: "2g.20gb", Share: 0.20},
	{Profile: "3g.40gb", Share: 0.20}, {Profile: "4g.40gb", Share: 0.10}, {Profile: "7g.80gb", Share: 0.10},
}

// wholePods are the whole-GPU pod sizes' shares of the whole-GPU arrivals.
var wholePods = []sim.WholeShare{{GPUs: 1, Share: 0.4}, {GPUs: 2, Share: 0.3}, {GPUs: 4, Share: 0.2}, {GPUs: 8, Share: 0.1}}

// wholeMix is one kind of trace: a steady whole-GPU share of the offered compute, or shares
// alternating every wholePhase arrivals.
type wholeMix struct {
	name   string
	shares []float64
	goal   float64 // points over the best static split
}

var wholeMixes = []wholeMix{
	{"steady 20 %", []float64{0.2}, 2},
	{"steady 40 %", []float64{0.4}, 2},
	{"steady 60 %", []float64{0.6}, 2},
	{"shifting 10 ↔ 70 %", []float64{0.1, 0.7}, 8},
}

var wholeLoads = []float64{0.9, 1.1}

// wholeTrace is mix mi's trace at load li with seed.
func wholeTrace(mi, li int, events int, seed uint64) *sim.MixedTrace {
	mx := wholeMixes[mi]
	phase := 0
	if len(mx.shares) > 1 {
		phase = wholePhase
	}
	tr, err := sim.GenerateMixed(sim.MixedSpec{
		Cluster: sim.Cluster{Nodes: wholeNodes, GPUsPerNode: gpusPerNode, Model: model},
		Load:    wholeLoads[li], Arrivals: events, Slices: wholeSlices, Whole: wholePods,
		SliceLifetime: wholeSliceLifetime, WholeLifetime: wholePodLifetime,
		Shares: mx.shares, Phase: phase, Seed: seed*1000 + uint64(mi*10+li),
	})
	if err != nil {
		fail(err)
	}
	return tr
}

// wholeRow is one trace's replays.
type wholeRow struct {
	static    *sim.MixedResult
	staticMIG int
	pool      *sim.MixedResult
	packed    *sim.MixedResult // one pool with sim.MixedOptions.PackNodes, a what-if
	ref       *sim.MixedPoolResult
}

// replayWhole replays one trace: every static split (the best overall acceptance kept; ties:
// the fewest MIG nodes), one pool, one pool with packed nodes, and the pool without geometry.
func replayWhole(tr *sim.MixedTrace, switchUnits float64, startWhole bool) wholeRow {
	var row wholeRow
	for k := 0; k <= tr.Cluster.Nodes; k++ {
		res, err := sim.RunMixed(tr, sim.MixedOptions{Policy: sim.StaticSplit, MIGNodes: k})
		if err != nil {
			fail(err)
		}
		if row.static == nil || res.Acceptance > row.static.Acceptance {
			row.static, row.staticMIG = res, k
		}
	}
	var err error
	if row.pool, err = sim.RunMixed(tr, sim.MixedOptions{Policy: sim.OnePool, SwitchTime: switchUnits, StartWhole: startWhole}); err != nil {
		fail(err)
	}
	if row.packed, err = sim.RunMixed(tr, sim.MixedOptions{Policy: sim.OnePool, SwitchTime: switchUnits, StartWhole: startWhole, PackNodes: true}); err != nil {
		fail(err)
	}
	if row.ref, err = sim.RunMixedPool(tr); err != nil {
		fail(err)
	}
	return row
}

// goalWords is a one-pool result's goals against the static split: the gain over it (goal
// points), whole-GPU acceptance no lower, at most 0.1 switches per accepted request.
func goalWords(static, r *sim.MixedResult, goal float64) string {
	gain := 100 * (r.Acceptance - static.Acceptance)
	return fmt.Sprintf("≥ static %+g: %s (%+.1f); whole ≥ static: %s; ≤ 0.1 sw/acc: %s", goal, metWord(gain >= goal-1e-9), gain,
		metWord(r.WholeAcceptance >= static.WholeAcceptance), metWord(r.SwitchesPerAccepted <= 0.1))
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// wholeSection prints the table of seed's traces.
func wholeSection(seed uint64, events int, switchTime, unit time.Duration, startWhole bool) {
	units := switchTime.Seconds() / unit.Seconds()
	fmt.Printf("Whole GPUs and slices, loss mode: %s, %d nodes × %d GPUs, %d arrivals per trace, seed %d; slices of the online section's mixed mix (mean lifetime %s), whole-GPU pods of 1/2/4/8 GPUs of one node (40/30/20/10 %% of them; mean lifetime %s); shifting mixes alternate every %d arrivals; a switch takes %s; one pool starts %s.\n",
		model, wholeNodes, gpusPerNode, events, seed, unit, time.Duration(wholePodLifetime*float64(unit)), wholePhase, switchTime, startWord(startWhole))
	fmt.Println("acceptance = accepted slice-time ÷ offered (a whole GPU counts 7 compute slices; less what requests lost waiting for a switch), overall and per class; static = the best split into MIG nodes and whole-GPU nodes for this trace (every split from 0 to all nodes tried; k = its MIG nodes); one pool = every GPU switchable, the core's decisions; pool = no geometry (any compute and memory anywhere, whole pods too: a reference, not a strict bound); sw/acc = MIG mode switches per accepted request; switching = GPU-time spent switching, % of the cluster's; stranded = whole-GPU pods refused while the cluster had enough free GPUs, on no one node.")
	fmt.Println()
	fmt.Println("| trace | load | policy | acceptance | whole | slice | sw/acc | switching | stranded | goals |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for mi, mx := range wholeMixes {
		for li, load := range wholeLoads {
			row := replayWhole(wholeTrace(mi, li, events, seed), units, startWhole)
			s := row.static
			fmt.Printf("| %s | %.1f | static split (k = %d) | %.1f%% | %.1f%% | %.1f%% | 0 | 0 | %d | |\n", mx.name, load, row.staticMIG,
				100*s.Acceptance, 100*s.WholeAcceptance, 100*s.SliceAcceptance, s.WholeStranded)
			for _, pr := range []struct {
				name string
				r    *sim.MixedResult
			}{{"one pool", row.pool}, {"one pool, nodes packed (what-if)", row.packed}} {
				p := pr.r
				fmt.Printf("| %s | %.1f | %s | %.1f%% | %.1f%% | %.1f%% | %.3f | %.4f%% | %d | %s |\n",
					mx.name, load, pr.name, 100*p.Acceptance, 100*p.WholeAcceptance, 100*p.SliceAcceptance, p.SwitchesPerAccepted,
					100*p.SwitchingShare, p.WholeStranded, goalWords(s, p, mx.goal))
			}
			fmt.Printf("| %s | %.1f | (pool, no geometry) | %.1f%% | %.1f%% | %.1f%% | | | | |\n", mx.name, load,
				100*row.ref.Acceptance, 100*row.ref.WholeAcceptance, 100*row.ref.SliceAcceptance)
		}
	}
	fmt.Println()
}

// wholeMeans prints, per trace kind and load, the mean over seeds against the goals.
func wholeMeans(seeds []uint64, events int, switchTime, unit time.Duration, startWhole bool) {
	units := switchTime.Seconds() / unit.Seconds()
	fmt.Printf("Whole GPUs and slices, mean of seeds %v: %s, %d nodes × %d GPUs, %d arrivals per trace; a switch takes %s; one pool starts %s. Acceptance in %%, gains in points over the best static split; whole = whole-GPU acceptance.\n\n",
		seeds, model, wholeNodes, gpusPerNode, events, switchTime, startWord(startWhole))
	fmt.Println("| trace | load | static (best split) | one pool | gain | worst seed | whole: static / one pool | sw/acc | goals | packed (what-if) | gain | whole | pool, no geometry |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for mi, mx := range wholeMixes {
		for li, load := range wholeLoads {
			var st, op, pk, ref, stW, opW, pkW, sw float64
			worst := math.Inf(1)
			for _, seed := range seeds {
				row := replayWhole(wholeTrace(mi, li, events, seed), units, startWhole)
				st += row.static.Acceptance
				op += row.pool.Acceptance
				pk += row.packed.Acceptance
				ref += row.ref.Acceptance
				stW += row.static.WholeAcceptance
				opW += row.pool.WholeAcceptance
				pkW += row.packed.WholeAcceptance
				sw += row.pool.SwitchesPerAccepted
				worst = min(worst, 100*(row.pool.Acceptance-row.static.Acceptance))
			}
			n := float64(len(seeds))
			gain := 100 * (op - st) / n
			fmt.Printf("| %s | %.1f | %.2f | %.2f | %+.2f | %+.2f | %.2f / %.2f | %.3f | ≥ %+g: %s; whole: %s; sw/acc: %s | %.2f | %+.2f | %.2f | %.2f |\n",
				mx.name, load, 100*st/n, 100*op/n, gain, worst, 100*stW/n, 100*opW/n, sw/n,
				mx.goal, metWord(gain >= mx.goal-1e-9), metWord(opW >= stW), metWord(sw/n <= 0.1),
				100*pk/n, 100*(pk-st)/n, 100*pkW/n, 100*ref/n)
		}
	}
	fmt.Println()
}

func startWord(whole bool) string {
	if whole {
		return "with every GPU whole"
	}
	return "with every GPU in MIG mode"
}
