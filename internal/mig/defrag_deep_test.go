package mig

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// DefragOptions.DeepWork bounds the levels above ShallowDefragMoves only: on random small
// clusters with small bounds, an answer the bound did not stop is the unbounded answer; a
// stopped one is Bounded, after the shallow search and the repack plans found nothing, and its
// plan, if any, has the unbounded plan's moves; a plan the bound missed is counted. Plans of at
// most two moves never see it.
func TestPlanDefragDeepWork(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 39))
	bounded, missed, deep := 0, 0, 0
	for c := 0; c < 4000; c++ {
		models := caseModels(c)
		nodes, movable := randomCluster(rng, models, 2+rng.IntN(3), 2+rng.IntN(3), 0.9)
		if c%2 == 0 {
			alike(rng, nodes, movable)
		}
		profs := models[0].Profiles()
		req := MustRequest(RequestItem{Profile: profs[len(profs)/2+rng.IntN(len(profs)-len(profs)/2)].Name, Count: 1})
		opt := DefragOptions{MaxMoves: 1 + rng.IntN(MaxDefragMoves), RepackGPUs: rng.IntN(2) * DefaultRepackGPUs}
		opt.DeepWork = -1
		full := PlanDefrag(nodes, req, movableSet(movable), opt)
		if full.Outcome == DefragPlanned && len(full.Plan.Moves) > ShallowDefragMoves && !full.Plan.Repack {
			deep++
		}
		opt.DeepWork = 1 + rng.IntN(4)
		res := PlanDefrag(nodes, req, movableSet(movable), opt)
		switch {
		case !res.Bounded:
			if !reflect.DeepEqual(res, full) {
				t.Fatalf("case %d: %+v under the bound, %+v without", c, res, full)
			}
		case res.Outcome == DefragPlanned:
			bounded++
			if len(res.Plan.Moves) != len(full.Plan.Moves) || len(res.Plan.Moves) <= ShallowDefragMoves {
				t.Fatalf("case %d: a plan of %d moves under the bound, %d without", c, len(res.Plan.Moves), len(full.Plan.Moves))
			}
		default:
			bounded++
			if full.Outcome == DefragPlanned {
				if len(full.Plan.Moves) <= ShallowDefragMoves || full.Plan.Repack {
					t.Fatalf("case %d: the bound lost a plan of %d moves (repack %v)", c, len(full.Plan.Moves), full.Plan.Repack)
				}
				missed++
			}
		}
		if opt.MaxMoves <= ShallowDefragMoves && res.Bounded {
			t.Fatalf("case %d: bounded with %d moves at most", c, opt.MaxMoves)
		}
	}
	t.Logf("%d plans of more than %d independent moves; %d answers bounded, %d plans missed", deep, ShallowDefragMoves, bounded, missed)
	if bounded == 0 || missed == 0 {
		t.Errorf("the bound never stopped a search (%d) or never missed a plan (%d)", bounded, missed)
	}
}

// On the benchmark's deep shape at 60 nodes (only three-move plans, in the last zone), a small
// deeper-search bound stops before them and says so; without it the plan is found.
func TestPlanDefragDeepWorkMisses(t *testing.T) {
	c := deepCluster()
	c.nodes, c.attrs, c.pods = c.nodes[len(c.nodes)-60:], c.attrs[len(c.attrs)-60:], c.pods[len(c.pods)-60*8:]
	for n := range c.attrs {
		c.attrs[n].labels[zoneLabel] = []string{"zone-0", "zone-3"}[min(n/30, 1)]
		for g := range c.pods[n*8 : n*8+8] {
			for _, p := range c.pods[n*8+g] {
				if p != nil {
					p.selector = map[string]string{zoneLabel: c.attrs[n].labels[zoneLabel]}
					p.class = 1 + min(n/30, 1)
				}
			}
		}
	}
	req := MustRequest(RequestItem{Profile: "4g.40gb", Count: 1})
	if res := c.plan(req, false, 4, 8); res.Outcome != DefragNoPlan || !res.Bounded {
		t.Fatalf("bound 8: %+v, want a bounded NoPlan", res)
	}
	res := c.plan(req, false, 4, -1)
	if res.Outcome != DefragPlanned || len(res.Plan.Moves) != 3 || res.Plan.Target.Node < 30 || res.Bounded {
		t.Fatalf("no bound: %+v, want three moves in the last zone", res)
	}
}
