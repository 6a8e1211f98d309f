// Package snapshot is the scheduler's in-memory view of the MIG state: per
// node, its GPUs (model, UUID, usability) and every placement that is taken,
// whether by a slice the agent reports, a committed SliceAllocation, or an
// in-memory reservation. It is fed by informers (see informers.go), rebuilt
// from the API on start, and read by Filter/Score without API calls.
package snapshot

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// GPU is one GPU of a node as the scheduler sees it.
type GPU struct {
	Index int32
	UUID  string
	// Model is the GPU's MIG model; zero for a GPU of no MIG model (which can only be whole).
	Model mig.Model
	// Mode is the GPU's mode (migapi.GPUServes), as in MIG.GPUs.
	Mode mig.GPUMode
	// Usable is true when Slicer may place new slices on the GPU: it serves (MIG.GPUs[i].Usable)
	// and is in MIG mode.
	Usable bool
	// Reason says why the GPU is not usable ("" when usable): why it serves nothing, or that it
	// is whole or switching (migapi.SlicesBlocked).
	Reason string
}

// Node is an immutable view of one node. Filter and Score read it without a lock.
type Node struct {
	Name string
	// MIG is what internal/mig scores; MIG.GPUs[i] is GPUs[i]. A GPU in whole mode or
	// switching is Usable there when it serves in its mode; readers that mean "takes slices"
	// read GPUs[i].Usable (or ask the core, whose slice rules skip such GPUs).
	MIG  mig.Node
	GPUs []GPU
	// Blocked is non-empty when the node takes no request at all, slice or whole GPU, and
	// says why: another tool owns MIG on it, its driver is not ready, or a driver upgrade
	// fences it.
	Blocked string
	// Reason is non-empty when no GPU of the node can take a slice, and says why: Blocked,
	// or every GPU unusable for slices (a node whose GPUs are all whole has one, and may still
	// take whole-GPU requests).
	Reason string
	// Lacks maps each profile (NVIDIA spelling) the node's driver does not have on one of its
	// GPUs' models to the reason Filter gives (driver.go); nil when it lacks none. Shared by
	// the node's snapshots and never modified.
	Lacks map[string]string
}

// Slot is one slice of a pod placed on a GPU: where (mig.Slot, shared with the agent) and
// which of the pod's slices it is.
type Slot struct {
	mig.Slot
	Index int32 // the slice's index among the pod's slices
}

// Allocation is what the cache keeps of a SliceAllocation.
type Allocation struct {
	Namespace, Name string
	PodName         string
	PodUID          types.UID
	NodeName        string
	Slot            Slot
	State           slicerv1alpha1.AllocationState
	Reason, Message string
	Deleting        bool
	Spec            slicerv1alpha1.SliceAllocationSpec
}

// Reservation is the in-memory hold of a pod's slices between Reserve and
// PostBind (or Unreserve).
type Reservation struct {
	PodUID    types.UID
	Namespace string
	PodName   string
	NodeName  string
	Slots     []Slot
	// Committed is set once PreBind created the allocations.
	Committed bool
}

// Events is notified of changes (metrics, waiters); all methods are called
// with the cache lock held and must not call back into the cache.
type Events interface {
	// ReservationsChanged reports the number of reserved and committed reservations.
	ReservationsChanged(reserved, committed int)
	// Conflict reports a new double allocation between two pods (invariant I1).
	Conflict()
}

type nopEvents struct{}

func (nopEvents) ReservationsChanged(int, int) {}
func (nopEvents) Conflict()                    {}

// Cache is safe for concurrent use.
type Cache struct {
	log    logr.Logger
	events Events

	// freedGen counts the changes that may have freed room (see
	// FreedGeneration); onFreed is called after each, without the lock.
	freedGen atomic.Uint64
	onFreed  atomic.Pointer[func()]
	// gen counts every change of what the cache shows (see Generation).
	gen atomic.Uint64

	mu           sync.RWMutex
	nodes        map[string]*Node                           // published snapshots
	accels       map[string]*slicerv1alpha1.NodeAccelerator // by node name
	lacks        map[string]map[string]string               // Node.Lacks by node name, set with accels
	allocs       map[types.NamespacedName]*Allocation
	nodeAllocs   map[string]map[types.NamespacedName]*Allocation
	podAllocs    map[types.UID]map[types.NamespacedName]*Allocation
	reservations map[types.UID]*Reservation
	// waiting are the reservations that wait for their slots (deferred.go).
	waiting    map[types.UID]*Reservation
	conflicted map[string]bool // GPU UUIDs currently in conflict
	// waiters maps a pod to the channel closed at the next change of its allocations
	// (PodChanged); the entry goes with the close, or with the pod's reservation.
	waiters map[types.UID]chan struct{}
	// written tracks the allocations PreBind created per reservation; unseen keeps
	// the slots of created allocations the informer has not shown yet (unseen.go).
	written map[types.UID]*written
	unseen  map[types.NamespacedName]unseenClaim
	// fences are the nodes under a driver upgrade, by name, with their step (fence.go).
	fences map[string]string
}

// New returns an empty cache.
func New(log logr.Logger, events Events) *Cache {
	if events == nil {
		events = nopEvents{}
	}
	return &Cache{
		log: log, events: events,
		nodes:        map[string]*Node{},
		accels:       map[string]*slicerv1alpha1.NodeAccelerator{},
		lacks:        map[string]map[string]string{},
		allocs:       map[types.NamespacedName]*Allocation{},
		nodeAllocs:   map[string]map[types.NamespacedName]*Allocation{},
		podAllocs:    map[types.UID]map[types.NamespacedName]*Allocation{},
		reservations: map[types.UID]*Reservation{},
		waiting:      map[types.UID]*Reservation{},
		conflicted:   map[string]bool{},
		waiters:      map[types.UID]chan struct{}{},
		written:      map[types.UID]*written{},
		unseen:       map[types.NamespacedName]unseenClaim{},
	}
}

// Node returns the snapshot of a node, or nil when it has no NodeAccelerator.
func (c *Cache) Node(name string) *Node {
	c.mu.RLock()
	n := c.nodes[name]
	c.mu.RUnlock()
	return n
}

// Nodes returns every node snapshot, sorted by name.
func (c *Cache) Nodes() []*Node {
	c.mu.RLock()
	out := make([]*Node, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, n)
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// OnFreed registers f, called (without the cache lock, on the goroutine that
// made the change) after every change that may have freed room: a
// NodeAccelerator added or changed so (MayFreeRoom), an allocation deleted
// or moved, a reservation dropped. The scheduler learns of the same API changes through
// its own informers, which may run ahead of this cache's: a pod it retries on
// such an event can still find the old state here, and needs this second
// wake-up (see FreedGeneration). One callback; a later call replaces it.
func (c *Cache) OnFreed(f func()) {
	c.onFreed.Store(&f)
}

// FreedGeneration counts the changes that may have freed room. It is bumped
// after the snapshot shows the change and before OnFreed's callback runs: a
// reader that took the generation before reading the snapshot and finds it
// unchanged afterwards knows no room appeared in between.
func (c *Cache) FreedGeneration() uint64 {
	return c.freedGen.Load()
}

// Generation counts every change of what the cache shows: a node's snapshot (its GPUs, their
// usability, every taken placement), and with it Claims, Holders and the allocations, created
// or changed, of any pod (each such change rebuilds a node). It is bumped with the write lock
// held, as the change becomes visible: a reader that took the generation before reading the
// cache and finds it unchanged afterwards read one state, the one that generation names.
func (c *Cache) Generation() uint64 {
	return c.gen.Load()
}

// freed is called after a change that may have freed room, without the lock.
func (c *Cache) freed() {
	c.freedGen.Add(1)
	if f := c.onFreed.Load(); f != nil && *f != nil {
		(*f)()
	}
}

// SetNodeAccelerator records (or replaces) a node's NodeAccelerator. A new
// one, or a change that may free room (MayFreeRoom), counts as room freed.
func (c *Cache) SetNodeAccelerator(na *slicerv1alpha1.NodeAccelerator) {
	c.mu.Lock()
	old := c.accels[na.Name]
	c.accels[na.Name] = na
	if old == nil || old.Status.DriverVersion != na.Status.DriverVersion || !sameModels(old, na) {
		c.lacks[na.Name] = driverLacks(na)
	}
	c.rebuild(na.Name)
	c.mu.Unlock()
	if old == nil || MayFreeRoom(old, na) != "" {
		c.freed()
	}
}

// DeleteNodeAccelerator forgets a node's NodeAccelerator.
func (c *Cache) DeleteNodeAccelerator(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.accels, name)
	delete(c.lacks, name)
	c.rebuild(name)
}

// AllocationFromObject converts a SliceAllocation.
func AllocationFromObject(a *slicerv1alpha1.SliceAllocation) *Allocation {
	slot := migapi.SlotAsWritten(&a.Spec)
	return &Allocation{
		Namespace: a.Namespace, Name: a.Name,
		PodName: a.Spec.PodName, PodUID: types.UID(a.Spec.PodUID), NodeName: a.Spec.NodeName,
		Slot:  Slot{Slot: slot, Index: a.Spec.Index},
		State: a.Status.State, Reason: a.Status.Reason, Message: a.Status.Message,
		Deleting: a.DeletionTimestamp != nil,
		Spec:     a.Spec,
	}
}

// SetAllocation records (or replaces) a SliceAllocation.
func (c *Cache) SetAllocation(a *Allocation) {
	key := types.NamespacedName{Namespace: a.Namespace, Name: a.Name}
	c.mu.Lock()
	old := c.allocs[key]
	c.removeAlloc(key)
	c.allocs[key] = a
	addTo(c.nodeAllocs, a.NodeName, key, a)
	addTo(c.podAllocs, a.PodUID, key, a)
	if n := c.sawAllocation(key, a.PodUID, a.Slot.Index); n != "" && n != a.NodeName {
		c.rebuild(n) // the allocation holds its slot now, wherever it is
	}
	if old != nil && old.NodeName != a.NodeName {
		c.rebuild(old.NodeName)
	}
	c.rebuild(a.NodeName)
	c.notify(a.PodUID)
	if old != nil && old.PodUID != a.PodUID {
		c.notify(old.PodUID)
	}
	c.mu.Unlock()
	if old != nil && (old.NodeName != a.NodeName || old.Slot != a.Slot) {
		c.freed() // the old slot is free again
	}
}

// DeleteAllocation forgets a SliceAllocation (it is gone from the API).
func (c *Cache) DeleteAllocation(namespace, name string) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	c.mu.Lock()
	old := c.allocs[key]
	if old == nil {
		c.mu.Unlock()
		return
	}
	c.removeAlloc(key)
	c.rebuild(old.NodeName)
	c.notify(old.PodUID)
	c.mu.Unlock()
	c.freed()
}

func (c *Cache) removeAlloc(key types.NamespacedName) {
	old := c.allocs[key]
	if old == nil {
		return
	}
	delete(c.allocs, key)
	removeFrom(c.nodeAllocs, old.NodeName, key)
	removeFrom(c.podAllocs, old.PodUID, key)
}

func addTo[K comparable](m map[K]map[types.NamespacedName]*Allocation, k K, key types.NamespacedName, a *Allocation) {
	inner := m[k]
	if inner == nil {
		inner = map[types.NamespacedName]*Allocation{}
		m[k] = inner
	}
	inner[key] = a
}

func removeFrom[K comparable](m map[K]map[types.NamespacedName]*Allocation, k K, key types.NamespacedName) {
	if inner := m[k]; inner != nil {
		delete(inner, key)
		if len(inner) == 0 {
			delete(m, k)
		}
	}
}

// PodAllocations returns the allocations of a pod, ordered by index.
func (c *Cache) PodAllocations(uid types.UID) []*Allocation {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.podAllocationsLocked(uid)
}

func (c *Cache) podAllocationsLocked(uid types.UID) []*Allocation {
	inner := c.podAllocs[uid]
	if len(inner) == 0 {
		return nil
	}
	out := make([]*Allocation, 0, len(inner))
	for _, a := range inner {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Slot.Index != out[j].Slot.Index {
			return out[i].Slot.Index < out[j].Slot.Index
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// PodChanged returns a channel closed at the next change of the allocations of the pod
// uid (one created, changed or deleted). Only that pod's waiters wake: a PreBind waiting
// for its slices is not woken by every other pod's. The channel is dropped, unclosed, with
// the pod's reservation (Unreserve closes it), after which nobody waits on it.
func (c *Cache) PodChanged(uid types.UID) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.waiters[uid]
	if ch == nil {
		ch = make(chan struct{})
		c.waiters[uid] = ch
	}
	return ch
}

// notify wakes the waiters of pod uid; c.mu is held.
func (c *Cache) notify(uid types.UID) {
	if ch := c.waiters[uid]; ch != nil {
		close(ch)
		delete(c.waiters, uid)
	}
}

type holder struct {
	slot Slot
	pod  types.UID // "" for a slice the agent reports without an allocation we know
}

// rebuild recomputes and publishes the snapshot of one node, then takes the waiting
// reservations of the node whose slots it shows free (deferred.go). Called with the write lock
// held.
func (c *Cache) rebuild(name string) {
	c.rebuildNode(name)
	for c.takeWaiting(name) {
		c.rebuildNode(name)
	}
}

// rebuildNode recomputes and publishes the snapshot of one node; c.mu is held.
func (c *Cache) rebuildNode(name string) {
	c.gen.Add(1)
	na := c.accels[name]
	if na == nil {
		delete(c.nodes, name)
		return
	}
	n := &Node{Name: name, Lacks: c.lacks[name]}
	n.Blocked = migapi.NodeBlocked(na)
	if n.Blocked == "" {
		n.Blocked = c.fenceReason(name)
	}
	n.Reason = n.Blocked

	gpus := append([]slicerv1alpha1.GPUStatus(nil), na.Status.GPUs...)
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	// Claims by the scheduler's side (committed allocations, reservations, created
	// allocations not shown yet), per GPU.
	claims := map[string][]holder{}
	for _, a := range c.nodeAllocs[name] {
		claims[a.Slot.GPU] = append(claims[a.Slot.GPU], holder{slot: a.Slot, pod: a.PodUID})
	}
	for _, r := range c.reservations {
		if r.NodeName != name {
			continue
		}
		for _, s := range r.Slots {
			claims[s.GPU] = append(claims[s.GPU], holder{slot: s, pod: r.PodUID})
		}
	}
	for _, u := range c.unseenOn(name) {
		claims[u.slot.GPU] = append(claims[u.slot.GPU], holder{slot: u.slot, pod: u.pod})
	}
	anyUsable, notMIG := false, 0
	var occ []mig.Occupant
	for i := range gpus {
		var gpu GPU
		var mg mig.GPU
		gpu, mg, occ = c.gpuView(na, &gpus[i], claims[gpus[i].UUID], occ)
		anyUsable = anyUsable || mg.SliceUse() != mig.UseNo // in MIG mode, or may switch to it
		if mg.Usable && mg.Mode != mig.ModeMIG {
			notMIG++
		}
		n.GPUs = append(n.GPUs, gpu)
		n.MIG.GPUs = append(n.MIG.GPUs, mg)
	}
	if !anyUsable && n.Reason == "" {
		switch {
		case len(gpus) == 0:
			n.Reason = "no GPU reported"
		case notMIG > 0:
			n.Reason = fmt.Sprintf("no usable MIG GPU (%d of %d GPUs in whole mode or switching MIG mode)", notMIG, len(gpus))
		default:
			n.Reason = "no usable MIG GPU"
		}
	}
	c.nodes[name] = n
}

// gpuView is GPU g of na as the snapshot shows it and as the core is told (mig.GPU); claims are
// the scheduler's on it, occ is scratch space. The core's Usable is whether the GPU serves in
// its mode (migapi.GPUServes, the fence, its mode policy, a consistent occupancy); the
// snapshot's, whether it takes slices (migapi.SlicesBlocked too). Switchable is
// migapi.Switchable; InUse, that a pod holds the GPU whole. The mode is the one the claims
// commit the GPU to (claimedMode): a GPU the scheduler switched for a request is shown in its
// new mode from the claim on, before its agent has switched it.
func (c *Cache) gpuView(na *slicerv1alpha1.NodeAccelerator, g *slicerv1alpha1.GPUStatus, claims []holder, occ []mig.Occupant) (GPU, mig.GPU, []mig.Occupant) {
	gpu := GPU{Index: g.Index, UUID: g.UUID}
	reported, blocked, why := migapi.GPUServes(na, g)
	if blocked == migapi.BlockedHealth && g.HealthMessage != "" {
		// Say why (an NVML error, an XID, a reset the driver asks for): the Pending
		// reason of a pod that fits only there names it.
		why += " (" + g.HealthMessage + ")"
	}
	if why == "" {
		why = c.fenceReason(na.Name)
	}
	if why == "" {
		why = migapi.PolicyBlocks(reported, g)
	}
	switchable := migapi.Switchable(g)
	mode, whole, conflict := c.claimedMode(na.Name, g, reported, switchable, claims)
	if conflict != nil && why == "" {
		why = conflict.Error()
	}
	gpu.Mode = mode
	var state mig.GPUState
	if model, err := mig.ParseModel(string(g.Model)); err == nil && g.Model != "" {
		gpu.Model = model
		state = mig.EmptyGPU(model) // a whole or switching GPU: its model's empty GPU
		// In MIG mode without a conflict no claim is whole: the claims are slices.
		if mode == mig.ModeMIG && conflict == nil {
			state, occ, err = c.gpuState(na.Name, g, model, claims, occ)
			if err != nil && why == "" {
				why = err.Error()
			}
		}
	}
	serves := why == ""
	gpu.Reason = why
	if serves {
		_, gpu.Reason = migapi.SlicesBlocked(mode, g)
	}
	gpu.Usable = gpu.Reason == ""
	return gpu, mig.GPU{State: state, Usable: serves, Mode: mode, Switchable: switchable, InUse: whole}, occ
}

// claimedMode is the mode the scheduler's claims commit GPU g to, reported being the mode NVML
// reports (GPUServes), and whether a pod holds it whole. A whole-GPU claim makes it whole; a
// slice claim on a GPU that is whole or switching makes it MIG when the GPU may switch (the
// switch is the claim's) or is switching; no claim leaves reported. A whole-GPU claim beside
// any other claim, or a slice claim on a whole GPU that may not switch, is a double allocation
// (I1), handled as two pods on overlapping slots are (the GPU unusable, the conflict counted
// once).
func (c *Cache) claimedMode(node string, g *slicerv1alpha1.GPUStatus, reported mig.GPUMode, switchable bool, claims []holder) (mig.GPUMode, bool, error) {
	// One pod's claim of a slot may be seen more than once (its allocation, its reservation,
	// the record of the allocation just created): holders count, not claims.
	var wholeBy types.UID
	whole, sliced := 0, 0
	for _, h := range claims {
		switch {
		case !h.slot.Whole():
			sliced++
		case whole == 0 || h.pod != wholeBy:
			wholeBy = h.pod
			whole++
		}
	}
	var err error
	mode := reported
	switch {
	case whole > 1 || (whole > 0 && sliced > 0):
		err = fmt.Errorf("a whole-GPU allocation and another allocation on one GPU (double allocation)")
	case whole > 0:
		mode = mig.ModeWhole
	case sliced > 0 && reported == mig.ModeWhole && !switchable:
		err = fmt.Errorf("slices allocated on a GPU in whole mode that may not switch (double allocation)")
	case sliced > 0:
		mode = mig.ModeMIG
	}
	if err == nil {
		if mode != mig.ModeMIG {
			delete(c.conflicted, g.UUID) // gpuState's in MIG mode
		}
		return mode, whole > 0, nil
	}
	c.conflict(g.UUID)
	c.log.Error(err, "scheduler claims conflict on a GPU", "node", node, "gpu", g.UUID, "pod", claims[0].pod)
	return reported, whole > 0, err
}

// conflict counts a new double allocation on GPU uuid, once while it lasts; c.mu is held.
func (c *Cache) conflict(uuid string) {
	if !c.conflicted[uuid] {
		c.conflicted[uuid] = true
		c.events.Conflict()
	}
}

// gpuState is the union of the scheduler's claims and the slices the agent
// reports (mig.Occupancy, claims first, each slot once). Two pods claiming
// overlapping slots is a double allocation (I1): the GPU is made unusable and
// the conflict counted once. A layout the agent reports that does not add up
// (S7) also makes the GPU unusable, with a reason. occ is scratch space.
func (c *Cache) gpuState(node string, g *slicerv1alpha1.GPUStatus, model mig.Model, claims []holder, occ []mig.Occupant) (mig.GPUState, []mig.Occupant, error) {
	occ = occ[:0]
	for _, h := range claims {
		occ = append(occ, mig.Occupant{Instance: mig.Instance{Profile: h.slot.Profile, Placement: h.slot.Placement}, Holder: string(h.pod)})
	}
	occ = migapi.AppendReported(occ, g)
	state, err := mig.Occupancy(model, occ, mig.FailOnMisfit)
	var misfit *mig.OccupancyError
	if err != nil && (!errors.As(err, &misfit) || misfit.Occupant < len(claims)) {
		c.conflict(g.UUID)
		c.log.Error(err, "scheduler claims overlap on a GPU: double allocation", "node", node, "gpu", g.UUID)
		return mig.GPUState{}, occ, fmt.Errorf("allocations on this GPU overlap (double allocation)")
	}
	delete(c.conflicted, g.UUID)
	switch {
	case err == nil:
		return state, occ, nil
	case misfit.Fault == mig.FaultUnknownProfile:
		c.log.Error(err, "agent reports an unknown profile", "node", node, "gpu", g.UUID)
		return mig.GPUState{}, occ, fmt.Errorf("agent reports unknown profile %q", g.Slices[misfit.Occupant-len(claims)].Profile)
	default:
		c.log.Error(err, "agent-reported layout conflicts with the scheduler's view", "node", node, "gpu", g.UUID)
		return mig.GPUState{}, occ, fmt.Errorf("reported slices conflict with allocations: %w", misfit.Err)
	}
}
