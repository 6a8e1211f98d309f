package snapshot

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// Claim is one taken slot of a node and who holds it: what preemption and the plugin's
// per-cycle overlay need to take a pod's slices away from, or give them back to, a node's
// state. The slots of a node's claims are exactly the instances of its snapshot (rebuild).
type Claim struct {
	Slot Slot
	// PodUID holds the slot; "" for a slice the agent reports with no allocation, reservation
	// or created allocation of the scheduler's.
	PodUID types.UID
	// Pod is namespace/name ("" with PodUID).
	Pod string
	// Leaving: the allocation is being deleted; its slot frees without anyone being evicted.
	Leaving bool
	// Allocated: the claim is a SliceAllocation the cache has seen (not a reservation, nor the
	// record of an allocation just created, nor a slice only the agent reports).
	Allocated bool
}

// Claims returns the claims of a node's GPUs by GPU UUID, each sorted by start (one claim per
// slot: the first of walkClaims' order). Off the hot path: preemption and nominated pods only.
func (c *Cache) Claims(node string) map[string][]Claim {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := map[string][]Claim{}
	seen := map[mig.Slot]bool{}
	c.walkClaims(node, nil, func(cl Claim) bool {
		if !seen[cl.Slot.Slot] {
			seen[cl.Slot.Slot] = true
			out[cl.Slot.GPU] = append(out[cl.Slot.GPU], cl)
		}
		return true
	})
	for gpu := range out {
		cl := out[gpu]
		sort.SliceStable(cl, func(i, j int) bool { return cl[i].Slot.Placement.Start < cl[j].Slot.Placement.Start })
	}
	return out
}

// ClaimAt returns the claim Claims(node) holds at slot, without building the node's claims: the
// first claim of that slot in walkClaims' order. The defragmentation planner asks it about one
// slice at a time on every node (scheduler/plugin/defrag.go).
func (c *Cache) ClaimAt(node string, slot mig.Slot) (Claim, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var found Claim
	ok := false
	c.walkClaims(node, func(s mig.Slot) bool { return s == slot }, func(cl Claim) bool {
		found, ok = cl, true
		return false
	})
	return found, ok
}

// walkClaims calls visit with the node's claims whose slot passes keep (every claim when keep is
// nil), in the order that decides between two claims of one slot: allocations by name, then
// reservations, then created allocations not shown yet, then slices only the agent reports.
// visit returns false to stop. The caller holds c.mu.
func (c *Cache) walkClaims(node string, keep func(mig.Slot) bool, visit func(Claim) bool) {
	kept := func(s mig.Slot) bool { return keep == nil || keep(s) }
	var allocs []*Allocation
	for _, a := range c.nodeAllocs[node] {
		if kept(a.Slot.Slot) {
			allocs = append(allocs, a)
		}
	}
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].Name < allocs[j].Name })
	for _, a := range allocs {
		if !visit(Claim{Slot: a.Slot, PodUID: a.PodUID, Pod: a.Namespace + "/" + a.PodName, Leaving: a.Deleting, Allocated: true}) {
			return
		}
	}
	for _, r := range c.reservations {
		if r.NodeName != node {
			continue
		}
		for _, s := range r.Slots {
			if kept(s.Slot) && !visit(Claim{Slot: s, PodUID: r.PodUID, Pod: r.Namespace + "/" + r.PodName}) {
				return
			}
		}
	}
	for _, u := range c.unseenOn(node) {
		if kept(u.slot.Slot) && !visit(Claim{Slot: u.slot, PodUID: u.pod, Pod: u.podName}) {
			return
		}
	}
	if na := c.accels[node]; na != nil {
		for _, g := range na.Status.GPUs {
			for _, s := range g.Slices {
				prof, err := migapi.Profile(s.Profile)
				if err != nil {
					continue // the snapshot makes such a GPU unusable (gpuState)
				}
				sl := mig.Slot{GPU: g.UUID, Profile: prof, Placement: migapi.Placement(s.Placement)}
				if kept(sl) && !visit(Claim{Slot: Slot{Slot: sl}}) {
					return
				}
			}
		}
	}
}

// PodClaimsOn reports whether the pod holds any slot of the node (an allocation, a
// reservation or a created allocation not shown yet).
func (c *Cache) PodClaimsOn(uid types.UID, node string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, a := range c.podAllocs[uid] {
		if a.NodeName == node {
			return true
		}
	}
	if r := c.reservations[uid]; r != nil && r.NodeName == node && len(r.Slots) > 0 {
		return true
	}
	for _, u := range c.unseenOn(node) {
		if u.pod == uid {
			return true
		}
	}
	return false
}
