package snapshot

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// A reservation may wait for its slots: defragmentation's repack plans hold a moved pod's
// destination where another moved pod's slice still is (scheduler/plugin/defrag_evict.go). The
// cache takes such a reservation itself, under its lock, in the very change that frees the last
// of its slots (rebuild), so no other reservation can take the room between that change and
// anyone noticing it. While it waits it takes nothing, but a reservation of another pod that
// overlaps its slots is refused, so that a room freed in parts is kept for it whole.

// HoldWhenFree holds r as Reserve does when its slots can be taken now; otherwise it keeps r
// waiting (Waiting) until the cache can take it. It reports whether r is held now, and fails as
// Reserve does for a pod that holds or awaits a reservation, a node without NodeAccelerator, or
// a slot on a GPU the node does not have or cannot use.
func (c *Cache) HoldWhenFree(r *Reservation) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkNew(r); err != nil {
		return false, err
	}
	if err := c.overlapsWaiting(r); err == nil && c.canTake(r) == nil {
		c.hold(r)
		return true, nil
	}
	n := c.nodes[r.NodeName]
	if n == nil {
		return false, fmt.Errorf("node %s has no NodeAccelerator", r.NodeName)
	}
	for _, s := range r.Slots {
		usable := false
		for _, g := range n.GPUs {
			usable = usable || (g.UUID == s.GPU && g.Usable)
		}
		if !usable {
			return false, fmt.Errorf("GPU %s of node %s is not usable", s.GPU, r.NodeName)
		}
	}
	c.waiting[r.PodUID] = r
	return false, nil
}

// Waiting reports whether the reservation of uid waits for its slots.
func (c *Cache) Waiting(uid types.UID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.waiting[uid]
	return ok
}

// takeWaiting holds the first waiting reservation of the node (by UID) whose slots can be taken
// now, and reports whether there was one; c.mu is held.
func (c *Cache) takeWaiting(node string) bool {
	if len(c.waiting) == 0 {
		return false
	}
	var uids []types.UID
	for uid, r := range c.waiting {
		if r.NodeName == node {
			uids = append(uids, uid)
		}
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	for _, uid := range uids {
		r := c.waiting[uid]
		if c.canTake(r) != nil {
			continue
		}
		delete(c.waiting, uid)
		c.reservations[uid] = r
		c.trackWrites(r)
		c.reportReservations()
		return true
	}
	return false
}

// overlapsWaiting refuses a reservation that overlaps a slot another pod's waiting reservation
// waits for; c.mu is held.
func (c *Cache) overlapsWaiting(r *Reservation) error {
	for uid, w := range c.waiting {
		if uid == r.PodUID || w.NodeName != r.NodeName {
			continue
		}
		for _, s := range r.Slots {
			for _, ws := range w.Slots {
				if s.Overlaps(ws.Slot) {
					return fmt.Errorf("GPU %s of node %s: %s is held, waiting for the slices there to be released",
						s.GPU, r.NodeName, ws.Slot)
				}
			}
		}
	}
	return nil
}
