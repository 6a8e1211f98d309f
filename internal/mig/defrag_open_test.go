package mig

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The opening-set rule (defrag_open.go) changes no answer: on random clusters, most of them
// copies of two GPUs (few states, many GPUs alike), with no restriction, per-slice
// destinations, or destination classes mixed with per-slice restrictions, and some with small
// work bounds, the planner gives what it gives without the rule (plan, destinations, target),
// examining no more removal sets and asking the movability callback no more often; on many,
// less.
func TestPlanDefragOpeningSetsChangeNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 13))
	const cases = 4000
	fewerAsks, fewerSets, planned, noPlan, bounded := 0, 0, 0, 0, 0
	for c := 0; c < cases; c++ {
		models := caseModels(c)
		nn := 2 + rng.IntN(4)
		nodes, movable := randomCluster(rng, models, nn, 1+rng.IntN(4), 0.8)
		if c%4 != 3 {
			alike(rng, nodes, movable)
		}
		d := randomClassDest(rng, nn)
		mode := c % 4 // 0: anywhere; 1: per-slice destinations; 2, 3: classes and per-slice
		for _, k := range sortedSliceKeys(movable) {
			switch r := rng.IntN(5); {
			case r == 0: // unrestricted
			case r == 1 || mode == 1:
				var set []int
				for n := 0; n < nn; n++ {
					if rng.IntN(2) == 0 {
						set = append(set, n)
					}
				}
				d.allowed[k] = set
			default:
				d.classOf[k] = 1 + rng.IntN(3)
			}
		}
		req := randomRequest(rng, models[0])
		opt := DefragOptions{MaxMoves: 1 + rng.IntN(3)}
		switch mode {
		case 0: // anywhere
		case 1:
			opt.Destinations = d.dest
		default:
			opt.Destinations, opt.DestinationClass = d.dest, d.class
		}
		if c%9 == 0 {
			opt.MaxRemovalSets = 1 + rng.IntN(8)
		}
		var asks, oldAsks int
		res := planDefragRules(nodes, req, countAsks(movable, &asks), opt, false, false)
		old := planDefragRules(nodes, req, countAsks(movable, &oldAsks), opt, false, true)
		// With the work bound reached, the rule's search goes further on the same budget and
		// may ask about more GPUs.
		if res.RemovalSets > old.RemovalSets || (asks > oldAsks && !old.Bounded) {
			t.Fatalf("case %d: %d removal sets and %d movability asks with the rule, %d and %d without", c, res.RemovalSets, asks, old.RemovalSets, oldAsks)
		}
		if asks < oldAsks {
			fewerAsks++
		}
		if res.RemovalSets < old.RemovalSets {
			fewerSets++
		}
		if old.Bounded {
			// The bound cuts the search without the rule earlier: the rule may only find more.
			bounded++
			if old.Outcome == DefragPlanned && (res.Outcome != DefragPlanned || len(res.Plan.Moves) > len(old.Plan.Moves)) {
				t.Fatalf("case %d: %+v with the rule, %+v without", c, res, old)
			}
			continue
		}
		res.RemovalSets, old.RemovalSets = 0, 0
		if fmt.Sprint(res) != fmt.Sprint(old) {
			t.Fatalf("case %d (%s on %v, %+v):\nwith the rule    %+v\nwithout the rule %+v", c, req.Slices()[0], nodes, opt, res, old)
		}
		switch res.Outcome {
		case DefragPlanned:
			planned++
		case DefragNoPlan:
			noPlan++
		}
	}
	t.Logf("%d plans, %d without a plan, %d bounded without the rule; %d of %d cases asked fewer movability questions, %d examined fewer removal sets",
		planned, noPlan, bounded, fewerAsks, cases, fewerSets)
	if fewerAsks < 200 || fewerSets < 40 || planned < 300 || noPlan < 200 || bounded == 0 {
		t.Errorf("the cases do not exercise the rule: %d fewer asks, %d fewer sets, %d plans, %d without, %d bounded", fewerAsks, fewerSets, planned, noPlan, bounded)
	}
}

// countAsks is movableSet(set) counting its calls in asks.
func countAsks(set map[sliceKey]bool, asks *int) MovableFunc {
	movable := movableSet(set)
	return func(n, g int, p Profile, pl Placement) bool {
		*asks++
		return movable(n, g, p, pl)
	}
}

// BenchmarkPlanDefragScheduler's "no-plan" shape, small, counted. Nodes 0..5: one H100 with a
// movable 2g.20gb@0 and 2g.20gb@2 of class 2 and a fixed 3g.40gb@4; the two 2g.20gb are the one
// set of two whose removal opens the 4g.40gb. Node 6: a full H100, class 2's only node. Node 7:
// a fixed 3g.40gb@0, room for a 2g.20gb at 4 (so no slice is stuck for the stuck-slice rule),
// on a node class 2 may not use. No plan exists. With the rule each GPU of nodes 0..5 is
// passed over after one slot (its 2g.20gb@0 is movable and may go nowhere); without it every
// slice of each is asked about and each movable one's class.
func TestPlanDefragOpeningSetsAskLess(t *testing.T) {
	two0, two2 := Instance{"2g.20gb", Placement{0, 2}}, Instance{"2g.20gb", Placement{2, 2}}
	three := Instance{"3g.40gb", Placement{4, 4}}
	var nodes []Node
	d := &classDest{classOf: map[sliceKey]int{}, nodes: map[int][]int{2: {6}}}
	movable := map[sliceKey]bool{}
	for n := 0; n < 6; n++ {
		nodes = append(nodes, Node{GPUs: []GPU{h100(t, two0, two2, three)}})
		for _, start := range []int{0, 2} {
			movable[sliceKey{n, 0, start}] = true
			d.classOf[sliceKey{n, 0, start}] = 2
		}
	}
	nodes = append(nodes,
		Node{GPUs: []GPU{h100(t, Instance{"7g.80gb", Placement{0, 8}})}},
		Node{GPUs: []GPU{h100(t, Instance{"3g.40gb", Placement{0, 4}})}})
	req := MustRequest(RequestItem{Profile: "4g.40gb", Count: 1})
	classes := 0
	class := func(from SliceAt) int {
		classes++
		return d.class(from)
	}
	opt := DefragOptions{Destinations: d.dest, DestinationClass: class}
	for _, tc := range []struct {
		noOpen          bool
		asks, classAsks int
	}{
		// With the rule: node 7's 3g.40gb at one move; one 2g.20gb@0 per GPU of nodes 0..5
		// at two, and its class.
		{false, 1 + 6, 6},
		// Without: the same 3g.40gb; the three slices of each GPU of nodes 0..5, and the
		// class of each movable one. (Node 6's 7g.80gb is stuck: passed over either way.)
		{true, 1 + 6*3, 6 * 2},
	} {
		asks := 0
		classes = 0
		res := planDefragRules(nodes, req, countAsks(movable, &asks), opt, false, tc.noOpen)
		if res.Outcome != DefragNoPlan || res.Bounded || res.RemovalSets != 0 {
			t.Fatalf("noOpen %v: %+v; want an exhaustive NoPlan after no removal set", tc.noOpen, res)
		}
		if asks != tc.asks || classes != tc.classAsks {
			t.Errorf("noOpen %v: %d movability and %d class questions, want %d and %d", tc.noOpen, asks, classes, tc.asks, tc.classAsks)
		}
	}
}
