package snapshot

import (
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// PreBind creates a pod's SliceAllocations through the API, and the cache
// learns of them later, from its informer. A reservation dropped in between
// (PreBind failed: the pod was deleted, a later create failed) would leave
// the slot of an allocation that exists in the API free in the snapshot:
// another pod could reserve it, and the allocation arriving afterwards would
// be a double allocation (I1, docs/design/invariants.md). So the cache keeps
// such a slot taken, as an unseen claim, until the informer shows the
// allocation, which then holds it until it is deleted: released on evidence,
// never on a timer (rule R3).
//
// An informer that relists after missing both the create and the delete of
// the allocation never shows either; its unseen claim then stays until the
// scheduler restarts (the snapshot is rebuilt from the API): a slot kept
// taken, never one given twice.

// written is what the cache knows of the allocations of one reserved pod.
type written struct {
	created map[int32]bool // slice indexes whose allocation PreBind created
	seen    map[int32]bool // slice indexes whose allocation the informer showed since Reserve
}

// unseenClaim is the slot of a created allocation the informer has not shown yet.
type unseenClaim struct {
	node    string
	slot    Slot
	pod     types.UID
	podName string // namespace/name, for Holders
}

// Created records that PreBind created (or found identical) the allocation
// of slice index of the pod uid's reservation: the allocation exists in the
// API, whether or not the snapshot shows it yet. No-op without a reservation.
func (c *Cache) Created(uid types.UID, index int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.written[uid]; w != nil {
		w.created[index] = true
	}
}

// trackWrites starts the bookkeeping of a new reservation; the pod's
// allocations already in the snapshot count as seen. c.mu is held.
func (c *Cache) trackWrites(r *Reservation) {
	w := &written{created: map[int32]bool{}, seen: map[int32]bool{}}
	for _, a := range c.podAllocs[r.PodUID] {
		w.seen[a.Slot.Index] = true
	}
	c.written[r.PodUID] = w
}

// sawAllocation records that the informer showed the allocation key of pod
// uid, slice index. It returns the node of the unseen
// claim it resolved, "" when there was none. c.mu is held.
func (c *Cache) sawAllocation(key types.NamespacedName, uid types.UID, index int32) string {
	if w := c.written[uid]; w != nil {
		w.seen[index] = true
	}
	u, ok := c.unseen[key]
	if !ok {
		return ""
	}
	delete(c.unseen, key)
	return u.node
}

// keepUnseen ends the bookkeeping of a reservation being dropped: the slots
// whose allocations were created but not seen become unseen claims. It
// returns those slots. c.mu is held.
func (c *Cache) keepUnseen(r *Reservation) map[Slot]bool {
	w := c.written[r.PodUID]
	delete(c.written, r.PodUID)
	if w == nil {
		return nil
	}
	kept := map[Slot]bool{}
	for _, s := range r.Slots {
		if !w.created[s.Index] || w.seen[s.Index] {
			continue
		}
		key := types.NamespacedName{Namespace: r.Namespace, Name: slicerv1alpha1.AllocationName(r.PodName, string(r.PodUID), s.Index)}
		c.unseen[key] = unseenClaim{node: r.NodeName, slot: s, pod: r.PodUID, podName: r.Namespace + "/" + r.PodName}
		kept[s] = true
	}
	return kept
}

// unseenOn returns the unseen claims on a node. c.mu is held.
func (c *Cache) unseenOn(node string) []unseenClaim {
	var out []unseenClaim
	for _, u := range c.unseen {
		if u.node == node {
			out = append(out, u)
		}
	}
	return out
}
