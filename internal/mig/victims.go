package mig

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strings"
)

// Victim choice for preemption: which pods to evict from a GPU so that a higher-priority pod's
// slice can be placed there. A GPU holds at most seven instances, so every placement of the
// profile and every set of evictable owners is tried: the answer is exact.

// Holder is one GPU instance and who holds it, as preemption sees it.
type Holder struct {
	Instance
	// Owner identifies the holder (a pod's UID). An owner with several instances on the GPU
	// is one victim, and evicting it frees all of them. "" is an instance no pod can be asked
	// to give up (a slice the agent reports without an allocation).
	Owner string
	// Priority is the owner's priority; an owner whose priority is equal to or higher than the
	// preemptor's is never a victim.
	Priority int32
	// Pinned instances are never victims, whatever their priority (an owner the framework
	// does not offer as a victim, e.g. a pod being bound).
	Pinned bool
	// Leaving instances are being released already: their room is free at no cost and their
	// owner is not a victim for them.
	Leaving bool
	// Protected: a PodDisruptionBudget would refuse the owner's eviction. Whole-GPU preemption
	// evicts as few such owners as it can (WholeVictimChoice.Less); the slice choice reads
	// budgets through Pinned instead.
	Protected bool
}

// VictimChoice is where a profile goes once some owners are evicted, and what it costs.
type VictimChoice struct {
	Profile   Profile
	Placement Placement
	// Owners are the owners to evict, sorted; every instance of theirs on the GPU is freed.
	Owners []string
	// Priorities are the Owners' priorities, highest first.
	Priorities []int32
	// Instances is how many instances the evictions destroy.
	Instances int
	// Leaving is how many instances already being released overlap the placement: the
	// preemptor waits for them too.
	Leaving int
}

// Less orders choices from the cheapest: the fewest owners evicted; then the lowest priorities
// (the highest evicted priority first, then the next, ...); then the fewest instances
// destroyed; then the fewest leaving instances waited for; then the owner keys, compared as
// sorted lists; then the lowest start. Two different choices are never equal.
func (c VictimChoice) Less(o VictimChoice) bool {
	if len(c.Owners) != len(o.Owners) {
		return len(c.Owners) < len(o.Owners)
	}
	if d := slices.Compare(c.Priorities, o.Priorities); d != 0 {
		return d < 0
	}
	if c.Instances != o.Instances {
		return c.Instances < o.Instances
	}
	if c.Leaving != o.Leaving {
		return c.Leaving < o.Leaving
	}
	if d := slices.Compare(c.Owners, o.Owners); d != 0 {
		return d < 0
	}
	return c.Placement.Start < o.Placement.Start
}

// String is "3g.40gb@4 evicting [a b] (priorities [5 1])".
func (c VictimChoice) String() string {
	return fmt.Sprintf("%s@%d evicting [%s] (priorities %v)", LegalProfileName(c.Profile.Name), c.Placement.Start,
		strings.Join(c.Owners, " "), c.Priorities)
}

// ChooseVictims returns the cheapest way (VictimChoice.Less) to place one instance of p on a
// GPU of model m that holds hs, for a preemptor of priority preemptor, and false when no
// placement can be cleared: every legal placement overlaps an instance that cannot be evicted,
// or the count, media or compute limits still forbid it with every evictable owner gone.
// Inconsistent holders (an unknown profile, an illegal placement, overlapping instances, over
// a limit) are an error.
func ChooseVictims(m Model, hs []Holder, p Profile, preemptor int32) (VictimChoice, bool, error) {
	t := tableFor(m)
	if t == nil {
		return VictimChoice{}, false, fmt.Errorf("unknown GPU model %d", int(m))
	}
	if _, err := t.slotFor(p, Placement{Start: firstStart(p), Size: p.MemorySlices}); err != nil {
		return VictimChoice{}, false, err
	}
	v, err := newVictimGPU(m, t, hs, preemptor)
	if err != nil {
		return VictimChoice{}, false, err
	}
	var best VictimChoice
	found := false
	ns := t.nslots()
	for _, start := range p.Starts {
		sl := int(t.slotOf[p.index][start])
		pmem := t.slots[sl].mem
		if v.fixedMem&pmem != 0 {
			continue // an instance that cannot go overlaps
		}
		var must uint32 // owners overlapping the placement
		var others []int
		for o := range v.owners {
			if v.ownerMem[o]&pmem != 0 {
				must |= 1 << o
			} else {
				others = append(others, o)
			}
		}
		for sub := 0; sub < 1<<len(others); sub++ {
			set := must
			for i, o := range others {
				if sub&(1<<i) != 0 {
					set |= 1 << o
				}
			}
			idx, ok := v.stateWithout(set)
			if !ok || t.take[idx*ns+sl] == noState {
				continue
			}
			c := v.choice(t, p, start, set, pmem)
			if !found || c.Less(best) {
				best, found = c, true
			}
		}
	}
	return best, found, nil
}

func firstStart(p Profile) int {
	if len(p.Starts) == 0 {
		return -1
	}
	return p.Starts[0]
}

// victimGPU is a GPU's holders indexed for ChooseVictims.
type victimGPU struct {
	t        *modelTable
	mask     uint32   // slots held, leaving instances excluded
	owners   []string // evictable owners, sorted
	prio     []int32
	ownerMem []uint16 // memory of each evictable owner's instances
	ownerSl  []uint32 // slots of each evictable owner's instances
	fixedMem uint16   // memory of instances that cannot be evicted
	leaving  []uint16 // memory of each leaving instance
}

func newVictimGPU(m Model, t *modelTable, hs []Holder, preemptor int32) (*victimGPU, error) {
	v := &victimGPU{t: t}
	ns := t.nslots()
	idx := 0
	slotOf := make([]int, len(hs))
	// An owner is evictable when none of its instances is pinned and its priority is lower.
	blocked := map[string]bool{}
	for i, h := range hs {
		p, err := m.Profile(h.Profile)
		if err != nil {
			return nil, fmt.Errorf("holder %d: %w", i, err)
		}
		sl, err := t.slotFor(p, h.Placement)
		if err != nil {
			return nil, fmt.Errorf("holder %d: %w", i, err)
		}
		next := t.take[idx*ns+sl]
		if next == noState {
			return nil, fmt.Errorf("holder %d: cannot hold %s at %v with the other holders", i, p.Name, h.Placement)
		}
		idx, slotOf[i] = int(next), sl
		if h.Owner == "" || h.Pinned || h.Priority >= preemptor {
			blocked[h.Owner] = true
		}
	}
	index := map[string]int{}
	for _, h := range hs {
		if !h.Leaving && !blocked[h.Owner] {
			index[h.Owner] = 0
		}
	}
	for o := range index {
		v.owners = append(v.owners, o)
	}
	sort.Strings(v.owners)
	v.prio = make([]int32, len(v.owners))
	v.ownerMem = make([]uint16, len(v.owners))
	v.ownerSl = make([]uint32, len(v.owners))
	for i, o := range v.owners {
		index[o] = i
	}
	for i, h := range hs {
		sl := slotOf[i]
		mem := t.slots[sl].mem
		switch o, ok := index[h.Owner]; {
		case h.Leaving:
			v.leaving = append(v.leaving, mem)
			continue
		case ok:
			if v.ownerSl[o] == 0 || h.Priority > v.prio[o] {
				v.prio[o] = h.Priority
			}
			v.ownerMem[o] |= mem
			v.ownerSl[o] |= 1 << sl
		default:
			v.fixedMem |= mem
		}
		v.mask |= 1 << sl
	}
	return v, nil
}

// stateWithout is the index of the state holding v.mask less the instances of the owners in
// set.
func (v *victimGPU) stateWithout(set uint32) (int, bool) {
	mask := v.mask
	for o := range v.owners {
		if set&(1<<o) != 0 {
			mask &^= v.ownerSl[o]
		}
	}
	return v.t.stateOf(mask)
}

// stateOf finds the state index of a slot mask by taking its slots from the empty GPU (a legal
// occupancy can be built in any order).
func (t *modelTable) stateOf(mask uint32) (int, bool) {
	ns := t.nslots()
	idx := 0
	for mask != 0 {
		sl := bits.TrailingZeros32(mask)
		mask &^= 1 << sl
		next := t.take[idx*ns+sl]
		if next == noState {
			return 0, false
		}
		idx = int(next)
	}
	return idx, true
}

func (v *victimGPU) choice(t *modelTable, p Profile, start int, set uint32, pmem uint16) VictimChoice {
	c := VictimChoice{Profile: p, Placement: Placement{Start: start, Size: p.MemorySlices}}
	for _, mem := range v.leaving {
		if mem&pmem != 0 {
			c.Leaving++
		}
	}
	for o := range v.owners {
		if set&(1<<o) != 0 {
			c.Owners = append(c.Owners, v.owners[o])
			c.Priorities = append(c.Priorities, v.prio[o])
			c.Instances += bits.OnesCount32(v.ownerSl[o])
		}
	}
	sort.Slice(c.Priorities, func(i, j int) bool { return c.Priorities[i] > c.Priorities[j] })
	return c
}

// VictimGPU is one GPU of a node, with its holders, for PlanPreemption.
type VictimGPU struct {
	Model   Model
	Usable  bool
	Holders []Holder
}

// PreemptionPlan is where each slice of a request goes once Owners are evicted.
type PreemptionPlan struct {
	// Assignments place the request's slices (Slice indexes Request.Slices, GPU the node's GPUs).
	Assignments []Assignment
	// Owners are every owner evicted, sorted.
	Owners []string
	// Leaving is how many instances already being released the placements wait for.
	Leaving int
}

// PlanPreemption places a request on a node by evicting owners of lower priority than
// preemptor. The slices go largest first (Request order); each goes to the GPU and placement
// whose ChooseVictims choice is the cheapest (then the lowest GPU index), on the node as the
// earlier slices left it: their victims gone (every instance of theirs, on every GPU) and their
// placements taken. For a one-slice request the plan is exactly the cheapest on the node; for
// more slices it is greedy. False when some slice finds no placement.
func PlanPreemption(gpus []VictimGPU, req *Request, preemptor int32) (PreemptionPlan, bool, error) {
	if req == nil || req.n == 0 {
		return PreemptionPlan{}, false, fmt.Errorf("empty request")
	}
	evicted := map[string]bool{}
	placed := make([][]Holder, len(gpus))
	var plan PreemptionPlan
	for i := 0; i < req.n; i++ {
		bestGPU := -1
		var best VictimChoice
		for g, gpu := range gpus {
			p, ok := req.Profile(i, gpu.Model)
			if !gpu.Usable || !ok {
				continue
			}
			hs := make([]Holder, 0, len(gpu.Holders)+len(placed[g]))
			for _, h := range gpu.Holders {
				if h.Owner == "" || !evicted[h.Owner] {
					hs = append(hs, h)
				}
			}
			hs = append(hs, placed[g]...)
			c, ok, err := ChooseVictims(gpu.Model, hs, p, preemptor)
			if err != nil {
				return PreemptionPlan{}, false, fmt.Errorf("GPU %d: %w", g, err)
			}
			if ok && (bestGPU < 0 || c.Less(best)) {
				bestGPU, best = g, c
			}
		}
		if bestGPU < 0 {
			return PreemptionPlan{}, false, nil
		}
		for _, o := range best.Owners {
			evicted[o] = true
		}
		// The preemptor's own slices: held by nobody that can be evicted.
		placed[bestGPU] = append(placed[bestGPU], Holder{Instance: Instance{Profile: best.Profile.Name, Placement: best.Placement}, Pinned: true})
		plan.Assignments = append(plan.Assignments, Assignment{Slice: i, GPU: bestGPU, Profile: best.Profile, Placement: best.Placement})
		plan.Leaving += best.Leaving
	}
	for o := range evicted {
		plan.Owners = append(plan.Owners, o)
	}
	sort.Strings(plan.Owners)
	return plan, true, nil
}
