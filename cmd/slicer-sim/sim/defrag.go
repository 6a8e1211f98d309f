package sim

import (
	"fmt"
	"time"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migsim"
)

// evictor is the scheduler's Evict mode as the simulator replays it (Options.DefragMoves;
// scheduler/plugin/defrag.go and defrag_evict.go): a request that fits nowhere gets a plan from
// the planner, asked as the plugin asks it, over the slices whose pods the scheduler's rules let
// move; the plan is carried out when the eviction cap allows its moves, at once (the rooms it
// holds are taken at the plan's time), and each moved pod restarts at its destination. Not
// modelled: the pending pod's own wait for the moved slices to be released, PodDisruptionBudgets
// and namespace selectors (the traces have none), node filters on the destinations (every node
// admits every pod), and preemption (the traces have one priority).
type evictor struct {
	opt Options
	// unit is one unit of trace time; restart is Options.RestartTime in trace units.
	unit    time.Duration
	restart float64
	// capped: the cap applies; evictions are the times of the evictions made, counted by it.
	capped    bool
	cap       mig.EvictionCap
	evictions []time.Time
}

func newEvictor(opt Options) *evictor {
	e := &evictor{opt: opt, unit: opt.TimeUnit, capped: opt.MaxEvictions >= 0,
		cap: mig.EvictionCap{Max: opt.MaxEvictions, Window: opt.EvictionWindow}}
	if e.unit <= 0 {
		e.unit = time.Hour
	}
	if e.cap.Max == 0 {
		e.cap.Max = slicerv1alpha1.DefaultMaxEvictions
	}
	if e.cap.Window <= 0 {
		e.cap.Window = slicerv1alpha1.DefaultEvictionWindowSeconds * time.Second
	}
	e.restart = float64(opt.RestartTime) / float64(e.unit)
	return e
}

// clock is trace time t as a time on the cap's clock.
func (e *evictor) clock(t float64) time.Time {
	return time.Unix(0, 0).Add(time.Duration(t * float64(e.unit)))
}

// movable is the planner's movability callback at trace time now: the slice holds a running
// request whose pod the scheduler's rules let move (mig.PodMove), every one with AllMovable.
func (e *evictor) movable(where map[sliceKey]string, arrivals map[string]Event) mig.MovableFunc {
	return func(n, g int, _ mig.Profile, pl mig.Placement) bool {
		id, ok := where[sliceKey{n, g, pl.Start}]
		if !ok {
			return false
		}
		a := arrivals[id]
		return e.opt.AllMovable || mig.PodMove{ControllerKind: a.Controller, AnnotatedUnmovable: a.Unmovable, Slices: 1}.Check() == mig.Movable
	}
}

// place plans moves at trace time now for a request that fits nowhere and, when there is a
// plan the cap admits, carries it out on the nodes: every moved slice is released, then the
// request is placed at the plan's target and each moved slice re-created at its destination
// (its running request follows it), so an ordered plan needs nothing more. It returns the node
// and assignments of the request (-1 when not placed) and the moved requests.
func (e *evictor) place(nodes []mig.Node, req *mig.Request, now float64, where map[sliceKey]string, arrivals map[string]Event,
	active map[string]*live, res *Result) (int, []mig.Assignment, []string, error) {
	planner := mig.PlanDefrag
	if e.opt.DefragChains {
		planner = migsim.PlanDefragChains
	}
	out := planner(nodes, req, e.movable(where, arrivals), mig.DefragOptions{MaxMoves: e.opt.DefragMoves, RepackGPUs: e.opt.RepackGPUs})
	switch out.Outcome {
	case mig.DefragPlanned:
	case mig.DefragNoCapacity:
		res.DefragNoCapacity++
		return -1, nil, nil, nil
	default:
		res.DefragNoPlan++
		if out.Bounded {
			res.DefragBounded++
		}
		return -1, nil, nil, nil
	}
	plan := out.Plan
	if e.capped {
		var ok bool
		if e.evictions, ok = e.cap.Admit(e.evictions, e.clock(now), len(plan.Moves)); !ok {
			res.DefragCapped++
			return -1, nil, nil, nil
		}
		for range plan.Moves {
			e.evictions = append(e.evictions, e.clock(now))
		}
	}
	if plan.Repack {
		res.Repacks++
	}
	ids := make([]string, len(plan.Moves))
	for i, mv := range plan.Moves {
		f := mv.From
		g := &nodes[f.Node].GPUs[f.GPU]
		next, err := g.State.Release(f.Profile, f.Placement)
		if err != nil {
			return -1, nil, nil, fmt.Errorf("move from %+v: %w", f, err)
		}
		g.State = next
		k := sliceKey{f.Node, f.GPU, f.Placement.Start}
		ids[i] = where[k]
		delete(where, k)
	}
	tg := plan.Target
	as := []mig.Assignment{{Slice: 0, GPU: tg.GPU, Profile: tg.Profile, Placement: tg.Placement}}
	if err := mig.Apply(nodes[tg.Node], as); err != nil {
		return -1, nil, nil, fmt.Errorf("plan target: %w", err)
	}
	for i, mv := range plan.Moves {
		to := mv.To
		if err := mig.Apply(nodes[to.Node], []mig.Assignment{{GPU: to.GPU, Profile: to.Profile, Placement: to.Placement}}); err != nil {
			return -1, nil, nil, fmt.Errorf("move to %+v: %w", to, err)
		}
		l := active[ids[i]]
		if l == nil || len(l.as) != 1 {
			return -1, nil, nil, fmt.Errorf("moved slice %+v has no single-slice running request", mv.From)
		}
		l.node = to.Node
		l.as = []mig.Assignment{{GPU: to.GPU, Profile: to.Profile, Placement: to.Placement}}
		where[sliceKey{to.Node, to.GPU, to.Placement.Start}] = ids[i]
	}
	return tg.Node, as, ids, nil
}
