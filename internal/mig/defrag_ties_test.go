package mig

import "testing"

// TestPlanDefragTieTargetLosesLeast pins the tie-break between plans of as many moves and
// compute slices moved: the target is the GPU whose V falls least from before the plan to after
// it, not the one whose placement of the request alone loses least once its slices are out.
// Two GPUs each open a 4g.40gb by moving one 1g: A (1g at 0, 3g at 4) would end full, B (a lone
// 1g at 1) keeps room for a 3g.40gb beside the 4g. Both plans are legal (checkPlan); the rule
// picks B in either GPU order, where the request's placement alone picked A.
func TestPlanDefragTieTargetLosesLeast(t *testing.T) {
	one := func(start int) Instance { return Instance{"1g.10gb", Placement{start, 1}} }
	a := func(t *testing.T) GPU { return h100(t, one(0), Instance{"3g.40gb", Placement{4, 4}}) }
	b := func(t *testing.T) GPU { return h100(t, one(1)) }
	full4 := func(t *testing.T) GPU { return h100(t, Instance{"4g.40gb", Placement{0, 4}}) }
	req4 := MustRequest(RequestItem{Profile: "4g.40gb", Count: 1})
	for _, tc := range []struct {
		name    string
		gpus    []GPU
		movable map[sliceKey]bool // the two 1g
		want    int               // the target GPU: B's index
	}{
		{"A first", []GPU{a(t), b(t), full4(t)}, map[sliceKey]bool{{0, 0, 0}: true, {0, 1, 1}: true}, 1},
		{"B first", []GPU{b(t), a(t), full4(t)}, map[sliceKey]bool{{0, 0, 1}: true, {0, 1, 0}: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []Node{{GPUs: tc.gpus}}
			m := tc.gpus[0].State.model
			tab := tableFor(m)
			va, vb := tab.value[a(t).State.idx], tab.value[b(t).State.idx]
			vb4 := tab.value[h100(t, Instance{"4g.40gb", Placement{0, 4}}).State.idx]
			if vb-vb4 >= va {
				t.Fatalf("the example no longer separates the rules: V(A) %d, V(B) %d, V(4g) %d", va, vb, vb4)
			}
			movable := tc.movable
			res := PlanDefrag(nodes, req4, movableSet(movable), DefragOptions{})
			if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 1 {
				t.Fatalf("got %+v", res)
			}
			if res.Plan.Target.GPU != tc.want {
				t.Errorf("target GPU %d, want %d (the lone 1g's): %+v", res.Plan.Target.GPU, tc.want, res.Plan)
			}
			checkPlan(t, nodes, req4, movable, res.Plan)
		})
	}
}
