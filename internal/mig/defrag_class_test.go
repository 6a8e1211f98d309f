package mig

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Destination classes (DefragOptions.DestinationClass, defrag_class.go) and the rule that drops
// slices with nowhere to go under them (destStuck).

// classDest is a DestinationFunc and a DestinationClass over explicit tables: a slice in
// classOf goes to its class's nodes, any other slice to its own entry of allowed (anywhere when
// absent). asked counts the DestinationFunc's calls, checks the predicates' calls.
type classDest struct {
	classOf map[sliceKey]int
	nodes   map[int][]int
	allowed map[sliceKey][]int
	asked   int
	checks  int
}

// randomClassDest has classes 1, 2 and 3, each admitted by a random third of nn nodes, and
// no slice in a class yet.
func randomClassDest(rng *rand.Rand, nn int) *classDest {
	d := &classDest{classOf: map[sliceKey]int{}, nodes: map[int][]int{}, allowed: map[sliceKey][]int{}}
	for _, cl := range []int{1, 2, 3} {
		var set []int
		for n := 0; n < nn; n++ {
			if rng.IntN(3) == 0 {
				set = append(set, n)
			}
		}
		d.nodes[cl] = set
	}
	return d
}

func (d *classDest) in(set []int, n int) bool {
	d.checks++
	for _, a := range set {
		if a == n {
			return true
		}
	}
	return false
}

func (d *classDest) dest(from SliceAt) func(int) bool {
	d.asked++
	k := sliceKey{from.Node, from.GPU, from.Placement.Start}
	if c, ok := d.classOf[k]; ok {
		set := d.nodes[c]
		return func(n int) bool { return d.in(set, n) }
	}
	set, ok := d.allowed[k]
	if !ok {
		return nil
	}
	return func(n int) bool { return d.in(set, n) }
}

func (d *classDest) class(from SliceAt) int {
	return d.classOf[sliceKey{from.Node, from.GPU, from.Placement.Start}]
}

func (d *classDest) ok(k sliceKey, n int) bool {
	if c, ok := d.classOf[k]; ok {
		return d.in(d.nodes[c], n)
	}
	set, ok := d.allowed[k]
	return !ok || d.in(set, n)
}

// On random small clusters whose movable slices fall in a few classes (or none), the plan with
// classes is the plan without them (same moves, destinations and target), which has brute
// force's move count, and the search with classes examines no more removal sets; on some,
// fewer (destStuck).
func TestPlanDefragDestinationClassesChangeNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 11))
	pruned, planned, noPlan := 0, 0, 0
	for c := 0; c < 3000; c++ {
		models := caseModels(c)
		nn := 2 + rng.IntN(3)
		nodes, movable := randomCluster(rng, models, nn, 1+rng.IntN(3), 0.8)
		if c%2 == 0 {
			alike(rng, nodes, movable)
		}
		d := randomClassDest(rng, nn)
		for _, k := range sortedSliceKeys(movable) { // in order: the same cases each run
			switch rng.IntN(5) {
			case 0: // unrestricted
			case 1:
				d.allowed[k] = []int{k.node}
			default:
				d.classOf[k] = 1 + rng.IntN(3)
			}
		}
		req := randomRequest(rng, models[0])
		maxMoves := 1 + rng.IntN(3)
		with := DefragOptions{MaxMoves: maxMoves, Destinations: d.dest, DestinationClass: d.class}
		without := DefragOptions{MaxMoves: maxMoves, Destinations: d.dest}
		res := PlanDefrag(nodes, req, movableSet(movable), with)
		plain := PlanDefrag(nodes, req, movableSet(movable), without)
		old := planDefrag(nodes, req, movableSet(movable), with, true)
		if res.Bounded || plain.Bounded || old.Bounded {
			t.Fatalf("case %d: the work bound was reached on a small cluster", c)
		}
		if res.RemovalSets > plain.RemovalSets || res.RemovalSets > old.RemovalSets {
			t.Fatalf("case %d: %d removal sets with classes, %d without, %d without pruning", c, res.RemovalSets, plain.RemovalSets, old.RemovalSets)
		}
		if res.RemovalSets < plain.RemovalSets {
			pruned++
		}
		sets := res.RemovalSets
		res.RemovalSets, plain.RemovalSets, old.RemovalSets = 0, 0, 0
		if fmt.Sprint(res) != fmt.Sprint(plain) || fmt.Sprint(res) != fmt.Sprint(old) {
			t.Fatalf("case %d (%s on %v, classes %v %v, own %v):\nwith classes %+v\nwithout      %+v\nunpruned     %+v", c, req.Slices()[0], nodes, d.classOf, d.nodes, d.allowed, res, plain, old)
		}
		if res.Outcome != DefragPlanned && res.Outcome != DefragNoPlan {
			continue
		}
		want := bruteDefrag(nodes, req, movable, d.ok, maxMoves)
		switch {
		case res.Outcome == DefragPlanned && len(res.Plan.Moves) == want:
			planned++
			checkPlan(t, nodes, req, movable, res.Plan)
			for _, mv := range res.Plan.Moves {
				f := mv.From
				if !d.ok(sliceKey{f.Node, f.GPU, f.Placement.Start}, mv.To.Node) {
					t.Fatalf("case %d: move %v -> %v to a node its slice may not go to", c, f, mv.To)
				}
			}
		case res.Outcome == DefragNoPlan && want == -1:
			noPlan++
		default:
			t.Fatalf("case %d: %s with %d moves (%d removal sets), brute force %d", c, res.Outcome, len(res.Plan.Moves), sets, want)
		}
	}
	t.Logf("%d plans, %d without a plan, %d of 3000 cases examined fewer removal sets with classes", planned, noPlan, pruned)
	if pruned < 100 || planned < 100 || noPlan < 100 {
		t.Errorf("the cases do not exercise the classes: %d pruned, %d plans, %d without", pruned, planned, noPlan)
	}
}

// BenchmarkPlanDefragScheduler's "no-plan" shape, small: each of nodes 0..5 has one H100 whose
// movable 1g.10gb blocks the 7g.80gb; the 1g's pods may go only to node 6, whose GPU is full.
// With classes every slice is found to have nowhere to go before any removal set is examined,
// and the Destinations is asked once for all six slices; without them, each slice is asked
// about and each GPU's removal set examined.
func TestPlanDefragDestinationClassNowhere(t *testing.T) {
	one := Instance{"1g.10gb", Placement{0, 1}}
	var nodes []Node
	d := &classDest{classOf: map[sliceKey]int{}, nodes: map[int][]int{2: {6}}}
	movable := map[sliceKey]bool{}
	for n := 0; n < 6; n++ {
		nodes = append(nodes, Node{GPUs: []GPU{h100(t, one)}})
		movable[sliceKey{n, 0, 0}] = true
		d.classOf[sliceKey{n, 0, 0}] = 2
	}
	nodes = append(nodes, Node{GPUs: []GPU{h100(t, Instance{"7g.80gb", Placement{0, 8}})}})
	req := MustRequest(RequestItem{Profile: "7g.80gb", Count: 1})

	res := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{Destinations: d.dest, DestinationClass: d.class})
	if res.Outcome != DefragNoPlan || res.Bounded || res.RemovalSets != 0 {
		t.Fatalf("with classes: %+v; want NoPlan after no removal set", res)
	}
	if d.asked != 1 {
		t.Errorf("with classes: Destinations asked %d times, want once for the class", d.asked)
	}
	d.asked = 0
	plain := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{Destinations: d.dest})
	if plain.Outcome != DefragNoPlan || plain.RemovalSets != 6 || d.asked != 6 {
		t.Fatalf("without classes: %+v after %d asks; want NoPlan after 6 removal sets and asks", plain, d.asked)
	}
	d.asked = 0
	old := planDefrag(nodes, req, movableSet(movable), DefragOptions{Destinations: d.dest, DestinationClass: d.class}, true)
	if old.Outcome != DefragNoPlan || old.RemovalSets != 6 || d.asked != 1 {
		t.Fatalf("with classes, unpruned: %+v after %d asks; want NoPlan after 6 removal sets and one ask", old, d.asked)
	}
}

// A class's allowed GPUs are counted once per profile. Nodes 0..19: a movable 1g.10gb@0 (class
// x) blocks the 4g.40gb, a fixed 1g.10gb@4 is beside it; nodes 20..59: a 3g.40gb@0, room for
// the 1g.10gb; class 1 may go to nodes 58 and 59 only. Each slice the search looks at is counted
// over the 60 GPUs where a 1g.10gb fits: without classes the predicate is asked about each of
// them per slice, with classes once for the class (plus each slice's own node).
func TestPlanDefragDestinationClassCountsOnce(t *testing.T) {
	var nodes []Node
	d := &classDest{classOf: map[sliceKey]int{}, nodes: map[int][]int{1: {58, 59}}}
	movable := map[sliceKey]bool{}
	for n := 0; n < 20; n++ {
		nodes = append(nodes, Node{GPUs: []GPU{h100(t, Instance{"1g.10gb", Placement{0, 1}}, Instance{"1g.10gb", Placement{4, 1}})}})
		movable[sliceKey{n, 0, 0}] = true
		d.classOf[sliceKey{n, 0, 0}] = 1
	}
	for n := 20; n < 60; n++ {
		nodes = append(nodes, Node{GPUs: []GPU{h100(t, Instance{"3g.40gb", Placement{0, 4}})}})
	}
	req := MustRequest(RequestItem{Profile: "4g.40gb", Count: 1})
	res := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{Destinations: d.dest, DestinationClass: d.class})
	withAsked, withChecks := d.asked, d.checks
	d.asked, d.checks = 0, 0
	plain := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{Destinations: d.dest})
	if res.Outcome != DefragPlanned || fmt.Sprint(res) != fmt.Sprint(plain) {
		t.Fatalf("with classes %+v, without %+v; want the same plan", res, plain)
	}
	checkPlan(t, nodes, req, movable, res.Plan)
	if to := res.Plan.Moves[0].To.Node; to != 58 && to != 59 {
		t.Errorf("the 1g.10gb goes to node %d, not 58 or 59", to)
	}
	if withAsked != 1 || d.asked < 2 {
		t.Errorf("Destinations asked %d times with classes, %d without; want once with, once per slice looked at without", withAsked, d.asked)
	}
	// Both then ask about up to 60 nodes more for the plan's destination (bestUntouched).
	if withChecks > 2*60+d.asked || d.checks < 50*d.asked {
		t.Errorf("the predicate was asked %d times with classes, %d without, for %d slices; want at most 120 + one per slice with, about 60 per slice without", withChecks, d.checks, d.asked)
	}
	t.Logf("%d slices looked at; predicate asked %d times with classes, %d without", d.asked, withChecks, d.checks)
}

// DestinationFunc promises each predicate's caller one question per node: on random small
// clusters with per-slice destinations, classes, or both, no predicate the planner got is asked
// twice about one node (plan made included).
func TestPlanDefragAsksEachNodeOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 11))
	asked := 0
	for c := 0; c < 1000; c++ {
		models := caseModels(c)
		nn := 2 + rng.IntN(4)
		nodes, movable := randomCluster(rng, models, nn, 1+rng.IntN(4), 0.8)
		d := randomClassDest(rng, nn)
		for _, k := range sortedSliceKeys(movable) {
			if rng.IntN(2) == 0 {
				d.classOf[k] = 1 + rng.IntN(3)
			} else {
				var set []int
				for n := 0; n < nn; n++ {
					if rng.IntN(2) == 0 {
						set = append(set, n)
					}
				}
				d.allowed[k] = set
			}
		}
		var preds []map[int]int
		dest := func(from SliceAt) func(int) bool {
			f := d.dest(from)
			if f == nil {
				return nil
			}
			seen := map[int]int{}
			preds = append(preds, seen)
			return func(n int) bool {
				seen[n]++
				return f(n)
			}
		}
		opt := DefragOptions{MaxMoves: 1 + rng.IntN(3), Destinations: dest}
		if c%2 == 0 {
			opt.DestinationClass = d.class
		}
		PlanDefrag(nodes, randomRequest(rng, models[0]), movableSet(movable), opt)
		for i, seen := range preds {
			for n, times := range seen {
				asked += times
				if times > 1 {
					t.Fatalf("case %d: predicate %d asked %d times about node %d", c, i, times, n)
				}
			}
		}
	}
	if asked == 0 {
		t.Fatal("no predicate was asked")
	}
	t.Logf("%d questions to predicates", asked)
}
