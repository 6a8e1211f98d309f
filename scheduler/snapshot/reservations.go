package snapshot

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Reservations: the in-memory holds of a pod's slots between Reserve and PostBind (or
// Unreserve), checked against the snapshot they are taken on; those that wait for their slots
// are deferred.go's.

// Reserve holds the slots of a pod on a node, after checking that they are
// still free (they were chosen on a snapshot that may be older) and that none
// overlaps a reservation waiting for its slots (deferred.go). Slots the pod
// already holds through its own allocations are accepted as they are.
func (c *Cache) Reserve(r *Reservation) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkNew(r); err != nil {
		return err
	}
	if err := c.overlapsWaiting(r); err != nil {
		return err
	}
	if err := c.canTake(r); err != nil {
		return err
	}
	c.hold(r)
	return nil
}

// checkNew refuses a reservation for a pod that already holds or awaits one; c.mu is held.
func (c *Cache) checkNew(r *Reservation) error {
	if _, ok := c.reservations[r.PodUID]; ok {
		return fmt.Errorf("pod %s/%s already holds a reservation", r.Namespace, r.PodName)
	}
	if _, ok := c.waiting[r.PodUID]; ok {
		return fmt.Errorf("pod %s/%s already awaits a reservation", r.Namespace, r.PodName)
	}
	return nil
}

// canTake says why the reservation's slots cannot be taken on its node's snapshot (nil when
// they can); c.mu is held.
func (c *Cache) canTake(r *Reservation) error {
	own := map[Slot]bool{}
	for _, a := range c.podAllocs[r.PodUID] {
		own[a.Slot] = true
	}
	if !slices.ContainsFunc(r.Slots, func(s Slot) bool { return !own[s] }) {
		return nil // nothing new to hold: a node Slicer does not manage, or all adopted
	}
	n := c.nodes[r.NodeName]
	if n == nil {
		return fmt.Errorf("node %s has no NodeAccelerator", r.NodeName)
	}
	gpus := map[string]mig.GPU{} // the core's view, as the slots are taken
	for i, g := range n.GPUs {
		gpus[g.UUID] = n.MIG.GPUs[i]
	}
	for _, s := range r.Slots {
		if own[s] {
			continue
		}
		g, ok := gpus[s.GPU]
		if s.Whole() {
			if !ok || g.WholeUse() == mig.UseNo {
				return fmt.Errorf("GPU %s of node %s cannot be had whole", s.GPU, r.NodeName)
			}
			g.Mode, g.InUse = mig.ModeWhole, true
			gpus[s.GPU] = g
			continue
		}
		if !ok || g.SliceUse() == mig.UseNo { // in MIG mode, or to be switched to it
			return fmt.Errorf("GPU %s of node %s is not usable", s.GPU, r.NodeName)
		}
		st := g.State
		p, err := st.Model().Profile(s.Profile)
		if err != nil {
			return fmt.Errorf("GPU %s: %w", s.GPU, err)
		}
		next, err := st.Take(p, s.Placement)
		if err != nil {
			return fmt.Errorf("GPU %s of node %s: %w", s.GPU, r.NodeName, err)
		}
		g.Mode, g.State = mig.ModeMIG, next
		gpus[s.GPU] = g
	}
	return nil
}

// hold records a reservation canTake accepted; c.mu is held.
func (c *Cache) hold(r *Reservation) {
	c.reservations[r.PodUID] = r
	c.trackWrites(r)
	c.rebuild(r.NodeName)
	c.reportReservations()
}

// Commit marks a pod's reservation as committed (its allocations exist).
func (c *Cache) Commit(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.reservations[uid]; r != nil {
		r.Committed = true
		c.reportReservations()
	}
}

// Reservation returns a copy of a pod's reservation, or nil.
func (c *Cache) Reservation(uid types.UID) *Reservation {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r := c.reservations[uid]
	if r == nil {
		return nil
	}
	cp := *r
	cp.Slots = append([]Slot(nil), r.Slots...)
	return &cp
}

// Unreserve drops a pod's reservation and returns it (nil when there was
// none: Unreserve is idempotent). Dropping one frees room unless the pod's
// allocations hold every slot of it (PostBind's case). A slot whose allocation
// PreBind created (Created) but the snapshot does not show yet stays taken
// until the informer shows it (unseen.go).
func (c *Cache) Unreserve(uid types.UID) *Reservation {
	c.mu.Lock()
	c.notify(uid) // the pod's waiters are done (PostBind, Unreserve): wake any left, drop the channel
	if w := c.waiting[uid]; w != nil {
		// It took nothing, but other reservations that overlap it were refused.
		delete(c.waiting, uid)
		c.mu.Unlock()
		c.freed()
		return w
	}
	r := c.reservations[uid]
	if r == nil {
		c.mu.Unlock()
		return nil
	}
	delete(c.reservations, uid)
	held := c.keepUnseen(r) // created allocations the informer has not shown yet hold theirs
	if held == nil {
		held = map[Slot]bool{}
	}
	for _, a := range c.podAllocs[uid] {
		if a.NodeName == r.NodeName {
			held[a.Slot] = true
		}
	}
	freed := false
	for _, s := range r.Slots {
		freed = freed || !held[s]
	}
	c.rebuild(r.NodeName)
	c.reportReservations()
	c.mu.Unlock()
	if freed {
		c.freed()
	}
	return r
}

// ReservationCount returns the number of reservations held.
func (c *Cache) ReservationCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.reservations)
}

func (c *Cache) reportReservations() {
	reserved, committed := 0, 0
	for _, r := range c.reservations {
		if r.Committed {
			committed++
		} else {
			reserved++
		}
	}
	c.events.ReservationsChanged(reserved, committed)
}
