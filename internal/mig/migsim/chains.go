package migsim

import (
	"cmp"
	"slices"

	"github.com/slicer-operator/slicer/internal/mig"
)

// PlanDefragChains is mig.PlanDefrag that also looks for a two-move chain once no plan of one
// or two independent moves exists (and opt.MaxMoves allows two), before the repack plans and
// the plans of three or four moves: a movable slice b on a GPU X other than the target moves
// to a place free now on a GPU other than the target (X itself included), then the target's
// movable slice a moves into the room b left on X, then the request fits on the target. The
// plan is Ordered: a's destination is free only once b's slice is gone, so it cannot be held
// before anything is evicted, and the scheduler does not ask for chains
// (docs/design/defragmentation.md, Two-move chains). Not with opt.Destinations, as the
// scheduler would need them.
//
// The chain is the first in this order: targets in node then GPU order; a, the target's
// movable slices in the model's slot order (profile table order, then start in NVML order); hosts X in node
// then GPU order, each X's movable slices b in slot order and the placements d of a's profile
// on X without b in start order; b goes to its own GPU at the first placement free now and
// legal there, else to the GPU other than the target and X where the Slicer policy loses the
// least. The request takes the Slicer policy's placement on the target without a.
func PlanDefragChains(nodes []mig.Node, req *mig.Request, movable mig.MovableFunc, opt mig.DefragOptions) mig.DefragResult {
	maxMoves := opt.MaxMoves
	if maxMoves <= 0 {
		maxMoves = mig.DefaultDefragMoves
	}
	if opt.Destinations != nil || min(maxMoves, mig.MaxDefragMoves) < 2 {
		return mig.PlanDefrag(nodes, req, movable, opt)
	}
	shallow := opt
	shallow.MaxMoves, shallow.RepackGPUs = 2, 0
	res := mig.PlanDefrag(nodes, req, movable, shallow)
	if res.Outcome != mig.DefragNoPlan || res.Bounded {
		return res
	}
	if plan, ok := findChain(nodes, req, movable); ok {
		return mig.DefragResult{Outcome: mig.DefragPlanned, Plan: plan, RemovalSets: res.RemovalSets}
	}
	return mig.PlanDefrag(nodes, req, movable, opt)
}

// chainGPU is a usable GPU of a model that has the request's profile, by node and GPU index.
type chainGPU struct {
	n, g  int
	state mig.GPUState
}

// chainSearch is one findChain call: the GPUs, and what it learnt about them.
type chainSearch struct {
	gpus    []chainGPU
	movable mig.MovableFunc
	mov     map[int][]mig.SliceAt // per GPU index, movableInSlotOrder
	fit     map[string][]int      // per profile, the GPU indexes where it fits now
	opens   map[gpuProfile]bool   // oneRemovalOpens per GPU index and profile
	hosts   map[gpuProfile][]host // hostsOf per GPU index and profile
}

type gpuProfile struct {
	gpu     int
	profile string
}

// opensOne is oneRemovalOpens for gpus[i] and profile q, asked once per call.
func (c *chainSearch) opensOne(i int, q mig.Profile) bool {
	k := gpuProfile{i, q.Name}
	ok, seen := c.opens[k]
	if !seen {
		ok = oneRemovalOpens(c.gpus[i].state, q)
		c.opens[k] = ok
	}
	return ok
}

// findChain is the chain search of PlanDefragChains.
func findChain(nodes []mig.Node, req *mig.Request, movable mig.MovableFunc) (mig.DefragPlan, bool) {
	c := &chainSearch{movable: movable, mov: map[int][]mig.SliceAt{}, fit: map[string][]int{}, opens: map[gpuProfile]bool{}, hosts: map[gpuProfile][]host{}}
	for n := range nodes {
		for g, gpu := range nodes[n].GPUs {
			if _, ok := req.Profile(0, gpu.State.Model()); gpu.Usable && ok {
				c.gpus = append(c.gpus, chainGPU{n, g, gpu.State})
			}
		}
	}
	for ti, tg := range c.gpus {
		m := tg.state.Model()
		p, _ := req.Profile(0, m)
		if !c.opensOne(ti, p) {
			continue
		}
		for _, a := range c.movableOf(ti) {
			without, _ := tg.state.Release(a.Profile, a.Placement)
			target, ok := slicerPlacement(without, p)
			if !ok {
				continue
			}
			for xi, x := range c.gpus {
				if xi == ti || x.state.Model() != m || !c.opensOne(xi, a.Profile) {
					continue
				}
				if first, hole, ok := c.hostMove(ti, xi, a.Profile); ok {
					return mig.DefragPlan{Ordered: true, Moves: []mig.Move{first, {From: sliceAt(tg, a), To: hole}},
						Target: sliceAt(tg, mig.SliceAt{Profile: p, Placement: target})}, true
				}
			}
		}
	}
	return mig.DefragPlan{}, false
}

// hostMove finds, on host X = gpus[xi], the first movable slice b (slot order) and placement d
// of profile qa on X without b (start order) such that b has somewhere to go: a placement on X
// free now and legal with qa at d, or a GPU other than the target gpus[ti] and X where its
// profile fits now. It returns b's move and qa's place on X.
func (c *chainSearch) hostMove(ti, xi int, qa mig.Profile) (mig.Move, mig.SliceAt, bool) {
	x := c.gpus[xi]
	for _, h := range c.hostsOf(xi, qa) {
		if h.self != nil {
			return mig.Move{From: sliceAt(x, h.b), To: *h.self}, h.hole, true
		}
		if slices.ContainsFunc(c.fitsOn(h.b.Profile), func(i int) bool { return i != ti && i != xi }) {
			return mig.Move{From: sliceAt(x, h.b), To: c.bestElsewhere(ti, xi, h.b.Profile)}, h.hole, true
		}
	}
	return mig.Move{}, mig.SliceAt{}, false
}

// host is one way to make room for a profile on a host GPU: its movable slice b goes, the
// profile takes hole; self is b's place on its own GPU, free now and legal after, nil when none.
type host struct {
	b    mig.SliceAt
	hole mig.SliceAt
	self *mig.SliceAt
}

// hostsOf lists the hosts of gpus[xi] for profile qa in hostMove's order, once per call.
func (c *chainSearch) hostsOf(xi int, qa mig.Profile) []host {
	k := gpuProfile{xi, qa.Name}
	if hs, ok := c.hosts[k]; ok {
		return hs
	}
	x := c.gpus[xi]
	ins := x.state.Instances()
	var out []host
	for _, b := range c.movableOf(xi) {
		without, _ := x.state.Release(b.Profile, b.Placement)
		for _, d := range qa.Placements() {
			after, err := without.Take(qa, d)
			if err != nil {
				continue
			}
			h := host{b: b, hole: sliceAt(x, mig.SliceAt{Profile: qa, Placement: d})}
			for _, e := range b.Profile.Placements() {
				if !overlapsAny(ins, e) && after.CanTake(b.Profile, e) {
					to := sliceAt(x, mig.SliceAt{Profile: b.Profile, Placement: e})
					h.self = &to
					break
				}
			}
			out = append(out, h)
		}
	}
	c.hosts[k] = out
	return out
}

// movableOf is movableInSlotOrder of gpus[i], asked once per call.
func (c *chainSearch) movableOf(i int) []mig.SliceAt {
	out, ok := c.mov[i]
	if !ok {
		out = movableInSlotOrder(c.gpus[i], c.movable)
		c.mov[i] = out
	}
	return out
}

// fitsOn lists the indexes of the GPUs where profile q fits now.
func (c *chainSearch) fitsOn(q mig.Profile) []int {
	key := q.Model.String() + "/" + q.Name
	out, ok := c.fit[key]
	if !ok {
		for i, g := range c.gpus {
			if g.state.Model() == q.Model && g.state.Fits(q) {
				out = append(out, i)
			}
		}
		c.fit[key] = out
	}
	return out
}

// bestElsewhere is the Slicer policy's placement of profile q on the GPUs where it fits now
// other than gpus[ti] and gpus[xi] (there is one): the least future placeability lost, the
// first GPU among equals.
func (c *chainSearch) bestElsewhere(ti, xi int, q mig.Profile) mig.SliceAt {
	var node mig.Node
	var at []int
	for _, i := range c.fitsOn(q) {
		if i != ti && i != xi {
			node.GPUs = append(node.GPUs, mig.GPU{State: c.gpus[i].state, Usable: true})
			at = append(at, i)
		}
	}
	as, _ := mig.Place(node, mig.MustRequest(mig.RequestItem{Profile: q.Name, Count: 1}))
	return sliceAt(c.gpus[at[as[0].GPU]], mig.SliceAt{Profile: q, Placement: as[0].Placement})
}

// slicerPlacement is where the Slicer policy puts profile p on a GPU in state s.
func slicerPlacement(s mig.GPUState, p mig.Profile) (mig.Placement, bool) {
	as, err := mig.Place(mig.Node{GPUs: []mig.GPU{{State: s, Usable: true}}}, mig.MustRequest(mig.RequestItem{Profile: p.Name, Count: 1}))
	if err != nil {
		return mig.Placement{}, false
	}
	return as[0].Placement, true
}

// oneRemovalOpens reports whether p does not fit on s now but fits once one of its instances is
// gone.
func oneRemovalOpens(s mig.GPUState, p mig.Profile) bool {
	if s.Fits(p) {
		return false
	}
	for _, in := range s.Instances() {
		q, _ := s.Model().Profile(in.Profile)
		if without, err := s.Release(q, in.Placement); err == nil && without.Fits(p) {
			return true
		}
	}
	return false
}

// movableInSlotOrder lists the GPU's instances that movable allows, in the model's slot order:
// profile table order, then the profile's starts in NVML order.
func movableInSlotOrder(g chainGPU, movable mig.MovableFunc) []mig.SliceAt {
	m := g.state.Model()
	rank := map[string]int{}
	for i, p := range m.Profiles() {
		rank[p.Name] = i
	}
	var out []mig.SliceAt
	for _, in := range g.state.Instances() {
		q, _ := m.Profile(in.Profile)
		if movable(g.n, g.g, q, in.Placement) {
			out = append(out, mig.SliceAt{Profile: q, Placement: in.Placement})
		}
	}
	slices.SortFunc(out, func(a, b mig.SliceAt) int {
		return cmp.Or(cmp.Compare(rank[a.Profile.Name], rank[b.Profile.Name]),
			cmp.Compare(slices.Index(a.Profile.Starts, a.Placement.Start), slices.Index(b.Profile.Starts, b.Placement.Start)))
	})
	return out
}

// overlapsAny reports whether placement pl overlaps one of the instances.
func overlapsAny(instances []mig.Instance, pl mig.Placement) bool {
	for _, in := range instances {
		if pl.Start < in.Placement.Start+in.Placement.Size && in.Placement.Start < pl.Start+pl.Size {
			return true
		}
	}
	return false
}

// sliceAt is the slice s (profile and placement) on GPU g.
func sliceAt(g chainGPU, s mig.SliceAt) mig.SliceAt {
	s.Node, s.GPU = g.n, g.g
	return s
}
