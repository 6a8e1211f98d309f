package mig

import (
	"math/rand/v2"
	"testing"
)

// Moved slices restricted to some nodes (DefragOptions.Destinations), as a scheduler restricts
// them by their pods' node selectors, affinities and taints.

// destMap is a DestinationFunc over an explicit table: a slice listed goes only to the nodes
// listed for it; a slice not listed goes anywhere. asked counts the calls per slice.
func destMap(allowed map[sliceKey][]int, asked map[sliceKey]int) DestinationFunc {
	return func(from SliceAt) func(int) bool {
		k := sliceKey{from.Node, from.GPU, from.Placement.Start}
		if asked != nil {
			asked[k]++
		}
		nodes, ok := allowed[k]
		if !ok {
			return nil
		}
		return func(n int) bool {
			for _, a := range nodes {
				if a == n {
					return true
				}
			}
			return false
		}
	}
}

func allowedFunc(allowed map[sliceKey][]int) func(sliceKey, int) bool {
	return func(k sliceKey, n int) bool {
		nodes, ok := allowed[k]
		if !ok {
			return true
		}
		for _, a := range nodes {
			if a == n {
				return true
			}
		}
		return false
	}
}

// randomRequest is one slice of a random profile of m; half the requests are of the larger half
// of the profiles, which fragmentation blocks.
func randomRequest(rng *rand.Rand, m Model) *Request {
	profs := m.Profiles()
	pi := rng.IntN(len(profs))
	if rng.IntN(2) == 0 {
		pi = len(profs)/2 + rng.IntN(len(profs)-len(profs)/2)
	}
	return MustRequest(RequestItem{Profile: profs[pi].Name, Count: 1})
}

// checkDestinations fails the test unless every move lands on a node its slice may go to.
func checkDestinations(t *testing.T, allowed map[sliceKey][]int, plan DefragPlan) {
	t.Helper()
	ok := allowedFunc(allowed)
	for _, mv := range plan.Moves {
		f := mv.From
		if !ok(sliceKey{f.Node, f.GPU, f.Placement.Start}, mv.To.Node) {
			t.Fatalf("move %v -> %v: node %d is not among %v", f, mv.To, mv.To.Node, allowed[sliceKey{f.Node, f.GPU, f.Placement.Start}])
		}
	}
}

func TestPlanDefragDestinationsExamples(t *testing.T) {
	one := func(start int) Instance { return Instance{"1g.10gb", Placement{start, 1}} }
	req7 := MustRequest(RequestItem{Profile: "7g.80gb", Count: 1})
	// Two one-H100 nodes, each GPU blocked for 7g by one 1g: either 1g may move to the other node.
	nodes := []Node{{GPUs: []GPU{h100(t, one(0))}}, {GPUs: []GPU{h100(t, one(3))}}}
	movable := map[sliceKey]bool{{0, 0, 0}: true, {1, 0, 3}: true}

	t.Run("unrestricted: the first node's slice moves", func(t *testing.T) {
		res := PlanDefrag(nodes, req7, movableSet(movable), DefragOptions{})
		if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 1 || res.Plan.Moves[0].From.Node != 0 {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("the first node's slice pinned to its node: the other one moves", func(t *testing.T) {
		allowed := map[sliceKey][]int{{0, 0, 0}: {0}}
		res := PlanDefrag(nodes, req7, movableSet(movable), DefragOptions{Destinations: destMap(allowed, nil)})
		if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 1 {
			t.Fatalf("got %+v", res)
		}
		mv := res.Plan.Moves[0]
		if mv.From.Node != 1 || mv.To.Node != 0 || res.Plan.Target.Node != 1 {
			t.Errorf("the second node's 1g should move to the first node and the 7g take its GPU: %+v", res.Plan)
		}
		checkPlan(t, nodes, req7, movable, res.Plan)
		checkDestinations(t, allowed, res.Plan)
	})
	t.Run("both pinned: no plan", func(t *testing.T) {
		allowed := map[sliceKey][]int{{0, 0, 0}: {0}, {1, 0, 3}: {1}}
		asked := map[sliceKey]int{}
		res := PlanDefrag(nodes, req7, movableSet(movable), DefragOptions{Destinations: destMap(allowed, asked)})
		if res.Outcome != DefragNoPlan || res.Bounded {
			t.Fatalf("got %+v", res)
		}
		for k, n := range asked {
			if n != 1 {
				t.Errorf("slice %v: asked %d times, want once per call", k, n)
			}
		}
		if len(asked) != 2 {
			t.Errorf("asked about %v, want both slices", asked)
		}
	})
	t.Run("allowed on no node at all: no plan", func(t *testing.T) {
		allowed := map[sliceKey][]int{{0, 0, 0}: {}, {1, 0, 3}: {}}
		if res := PlanDefrag(nodes, req7, movableSet(movable), DefragOptions{Destinations: destMap(allowed, nil)}); res.Outcome != DefragNoPlan {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("a plentiful slice goes to an allowed untouched GPU", func(t *testing.T) {
		// Node 0's GPU is blocked by a 1g; nodes 1..4 each have an empty GPU; the 1g may go to
		// node 3 only.
		many := []Node{{GPUs: []GPU{h100(t, one(0), Instance{"3g.40gb", Placement{4, 4}})}}}
		for i := 0; i < 4; i++ {
			many = append(many, Node{GPUs: []GPU{h100(t, Instance{"4g.40gb", Placement{0, 4}}, one(4))}})
		}
		req4 := MustRequest(RequestItem{Profile: "4g.40gb", Count: 1})
		mov := map[sliceKey]bool{{0, 0, 0}: true}
		allowed := map[sliceKey][]int{{0, 0, 0}: {3}}
		res := PlanDefrag(many, req4, movableSet(mov), DefragOptions{Destinations: destMap(allowed, nil)})
		if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 1 || res.Plan.Moves[0].To.Node != 3 {
			t.Fatalf("got %+v", res)
		}
		checkPlan(t, many, req4, mov, res.Plan)
	})
}

// Random small clusters with random restrictions: the planner's move count equals the
// oracle's, and every plan respects the restrictions.
func TestPlanDefragDestinationsAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 3))
	const maxMoves = 3
	count := map[DefragOutcome]int{}
	byMoves := map[int]int{}
	changed := 0 // cases where the restriction changed the answer
	for c := 0; c < 3000; c++ {
		models := caseModels(c)
		nn := 2 + rng.IntN(2)
		nodes, movable := randomCluster(rng, models, nn, 1+rng.IntN(2), 0.8)
		allowed := map[sliceKey][]int{}
		for _, k := range sortedSliceKeys(movable) { // in order: the same cases each run
			if rng.IntN(2) == 0 {
				continue
			}
			var set []int
			for n := 0; n < nn; n++ {
				if rng.IntN(2) == 0 {
					set = append(set, n)
				}
			}
			allowed[k] = set
		}
		req := randomRequest(rng, models[0])
		res := PlanDefrag(nodes, req, movableSet(movable), DefragOptions{MaxMoves: maxMoves, Destinations: destMap(allowed, nil)})
		count[res.Outcome]++
		if res.Bounded {
			t.Fatalf("case %d: the work bound was reached on a small cluster", c)
		}
		if res.Outcome == DefragFitsNow || res.Outcome == DefragNoCapacity {
			continue
		}
		want := bruteDefrag(nodes, req, movable, allowedFunc(allowed), maxMoves)
		if free := bruteDefrag(nodes, req, movable, nil, maxMoves); free != want {
			changed++
		}
		switch res.Outcome {
		case DefragPlanned:
			checkPlan(t, nodes, req, movable, res.Plan)
			checkDestinations(t, allowed, res.Plan)
			if len(res.Plan.Moves) != want {
				t.Fatalf("case %d (%s on %v, allowed %v): plan has %d moves, brute force %d:\n%+v", c, req.Slices()[0], nodes, allowed, len(res.Plan.Moves), want, res.Plan)
			}
			byMoves[want]++
		case DefragNoPlan:
			if want != -1 {
				t.Fatalf("case %d (%s on %v, allowed %v): no plan, brute force finds %d moves", c, req.Slices()[0], nodes, allowed, want)
			}
		default:
			t.Fatalf("case %d: outcome %s", c, res.Outcome)
		}
	}
	t.Logf("outcomes %v, plans by moves %v, answer changed by the restrictions in %d cases", count, byMoves, changed)
	if byMoves[1] == 0 || byMoves[2] == 0 || count[DefragNoPlan] == 0 || changed < 50 {
		t.Errorf("the random cases miss an outcome: %v, plans by moves %v, %d changed", count, byMoves, changed)
	}
}
