package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// Defragmentation in Evict mode (docs/design/defragmentation.md): a plan is carried out only
// once every room it needs is held. The pending pod is nominated to the target node with the
// opened placement, as a preemptor is (nominations.go); each moved pod's destination is held in
// the snapshot by a pledge, a reservation under a key of its own that no pod has, until a pod of
// the same controller asking for the same profile arrives (it then gets the destination as its
// nomination) or the replacement timeout passes. In an Ordered plan (a repack plan) a
// destination may be where another moved pod's slice still is: its pledge is deferred, held in
// memory only, and becomes a reservation as soon as those slices are gone (holdDeferred, at
// every PreFilter and Reserve); a replacement whose pledge is still deferred waits for it. Then
// the moved pods are evicted through the Eviction API, which enforces PodDisruptionBudgets.
// The plan is written on the pending pod before the first eviction, and a restarted scheduler
// rebuilds the pledges, the pending pod's placement and the cap's window from it
// (defrag_record.go).

// DefaultDefragReplacementTimeout is how long a moved pod's destination is held for its
// replacement, and how long a pending pod waits for the moves made for it before it may be
// planned for again.
const DefaultDefragReplacementTimeout = 5 * time.Minute

// defragRefusalBackoff is how long a pod whose plan was abandoned on a refused eviction gets no
// new plan. Without it, the rooms released by the abandoned plan wake the pod at once, and it
// would plan, hold and ask the Eviction API again in a tight loop while the budget says no.
const defragRefusalBackoff = 30 * time.Second

// Refusal reasons of slicer_scheduler_defrag_refused_total (bounded label values).
const (
	DefragRefusedEvictionCap      = "evictionCap"
	DefragRefusedRoomTaken        = "roomTaken"
	DefragRefusedEviction         = "evictionRefused"
	DefragRefusedReplacementLate  = "replacementTimeout"
	DefragRefusedNotRecorded      = "notRecorded"
	EventDefragmentationEvicting  = "DefragmentationEvicting"
	EventDefragmentationAbandoned = "DefragmentationAbandoned"
)

// refusal is a pending pod's backoff after an eviction refused its plan.
type refusal struct {
	until time.Time
	why   string
}

// pledge holds a moved pod's destination for its replacement.
type pledge struct {
	key      types.UID // the reservation's key in the snapshot cache
	owner    types.UID // the moved pod's controller
	profile  string
	node     string
	slot     snapshot.Slot
	moved    string      // namespace/name of the moved pod
	pending  *corev1.Pod // the pod the plan was made for
	deadline time.Time
	// deferred: not yet a reservation, because moved slices of the plan still hold the room
	// (an Ordered plan); holdDeferred makes it one.
	deferred bool
}

// defragRun is the state of Evict mode, guarded by Plugin.mu.
type defragRun struct {
	pledges map[types.UID]*pledge
	// plans maps a pending pod to the deadline of the moves made for it.
	plans map[types.UID]time.Time
	// refused maps a pending pod whose plan an eviction refusal abandoned to the end of its
	// backoff (defragRefusalBackoff) and what it was told.
	refused   map[types.UID]refusal
	evictions []time.Time
	seq       int
	// deferred counts the deferred pledges (holdDeferred's fast path).
	deferred int
}

// reservation is the snapshot reservation that holds the pledge's room, named after the moved
// pod (its namespace, "replacement of <name>").
func (pl *pledge) reservation() *snapshot.Reservation {
	ns, name, _ := strings.Cut(pl.moved, "/")
	return &snapshot.Reservation{PodUID: pl.key, Namespace: ns, PodName: "replacement of " + name,
		NodeName: pl.node, Slots: []snapshot.Slot{pl.slot}}
}

// newPledgeKey is a pledge's reservation key, which no pod has.
func (p *Plugin) newPledgeKey() types.UID {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.defragRun.seq++
	return types.UID(fmt.Sprintf("defrag-pledge-%d", p.defragRun.seq))
}

// addPledge keeps a pledge, held or deferred.
func (p *Plugin) addPledge(pl *pledge) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.defragRun.pledges == nil {
		p.defragRun.pledges = map[types.UID]*pledge{}
	}
	p.defragRun.pledges[pl.key] = pl
	if pl.deferred {
		p.defragRun.deferred++
	}
}

// dropPledgeLocked forgets a pledge; p.mu held.
func (p *Plugin) dropPledgeLocked(pl *pledge) {
	if _, ok := p.defragRun.pledges[pl.key]; !ok {
		return
	}
	delete(p.defragRun.pledges, pl.key)
	if pl.deferred {
		p.defragRun.deferred--
	}
}

// freedByMoves reports whether move i's destination can be taken on its GPU once every slice
// the plan moves from that GPU is gone and the destinations of the moves before it there are
// taken: the room is held by the plan's own moved slices, not by anything else (as of the
// snapshot the plan was made on).
func freedByMoves(nodes []*snapshot.Node, plan mig.DefragPlan, i int) bool {
	to := plan.Moves[i].To
	st := nodes[to.Node].MIG.GPUs[to.GPU].State
	var err error
	for _, mv := range plan.Moves {
		if f := mv.From; f.Node == to.Node && f.GPU == to.GPU {
			if st, err = st.Release(f.Profile, f.Placement); err != nil {
				return false
			}
		}
	}
	for _, mv := range plan.Moves[:i] {
		if t := mv.To; t.Node == to.Node && t.GPU == to.GPU {
			if st, err = st.Take(t.Profile, t.Placement); err != nil {
				return false
			}
		}
	}
	return st.CanTake(to.Profile, to.Placement)
}

// holdDeferred turns the deferred pledges whose room is free into reservations. It runs at
// every PreFilter (sweepDefrag) and at the start of every Reserve, so no pod placed after the
// moved slices are gone takes a room a plan holds: the pod being reserved then finds it taken.
func (p *Plugin) holdDeferred() {
	p.mu.Lock()
	if p.defragRun.deferred == 0 {
		p.mu.Unlock()
		return
	}
	var waiting []*pledge
	for _, pl := range p.defragRun.pledges {
		if pl.deferred {
			waiting = append(waiting, pl)
		}
	}
	p.mu.Unlock()
	for _, pl := range waiting {
		if p.cache.Reserve(pl.reservation()) != nil {
			continue // still held by a moved slice being released
		}
		p.mu.Lock()
		if cur, ok := p.defragRun.pledges[pl.key]; ok && cur.deferred {
			cur.deferred = false
			p.defragRun.deferred--
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		p.cache.Unreserve(pl.key) // dropped meanwhile (claimed cannot be: it was deferred)
	}
}

// execute carries out a plan for pod: hold every room, then evict. It returns the result that
// nominates the pod to the target node (nil when nothing was evicted) and the words for its
// Pending reason.
func (p *Plugin) execute(ctx context.Context, pod *corev1.Pod, nodes []*snapshot.Node, plan mig.DefragPlan, m *movableIndex, words string) (*fwk.PostFilterResult, string) {
	now := p.clock()
	log := klog.FromContext(ctx)
	moved := make([]*corev1.Pod, len(plan.Moves))
	for i, mv := range plan.Moves {
		moved[i] = m.podAt(mv.From)
		if moved[i] == nil {
			return nil, "defragmentation (Evict): a moved pod is no longer known; planning again"
		}
	}
	p.mu.Lock()
	window := time.Duration(p.defrag.windowSeconds) * time.Second
	var admitted bool
	p.defragRun.evictions, admitted = mig.EvictionCap{Max: p.defrag.maxEvictions, Window: window}.Admit(p.defragRun.evictions, now, len(plan.Moves))
	capped := !admitted
	p.mu.Unlock()
	if capped {
		p.metrics.DefragRefused.WithLabelValues(DefragRefusedEvictionCap).Inc()
		return nil, fmt.Sprintf("defragmentation (Evict) waits: the plan's %d eviction(s) would pass the cap of %d per %s (%s)",
			len(plan.Moves), p.defrag.maxEvictions, window, words)
	}

	// Hold every destination, then the target, before anything is evicted.
	var held []*pledge
	release := func(ps []*pledge) {
		for _, pl := range ps {
			p.cache.Unreserve(pl.key)
			p.mu.Lock()
			p.dropPledgeLocked(pl)
			p.mu.Unlock()
		}
	}
	for i, mv := range plan.Moves {
		to := sliceOf(nodes, mv.To)
		owner := metav1.GetControllerOf(moved[i])
		pl := &pledge{key: p.newPledgeKey(), owner: owner.UID, profile: mv.From.Profile.Name, node: nodes[mv.To.Node].Name,
			slot: snapshot.Slot{Slot: to}, moved: moved[i].Namespace + "/" + moved[i].Name, pending: pod,
			deadline: now.Add(p.replacementTimeout)}
		if err := p.cache.Reserve(pl.reservation()); err != nil {
			if !plan.Ordered || !freedByMoves(nodes, plan, i) {
				release(held)
				p.metrics.DefragRefused.WithLabelValues(DefragRefusedRoomTaken).Inc()
				return nil, "defragmentation (Evict): a destination was taken before it could be held (" + err.Error() + "); planning again"
			}
			pl.deferred = true // the plan's own moved slices hold it: held once they are gone
		}
		p.addPledge(pl)
		held = append(held, pl)
	}
	target := nodes[plan.Target.Node].Name
	opened := sliceOf(nodes, plan.Target)
	p.setNomination(pod, target, []snapshot.Slot{{Slot: opened}}, false)
	// Written before the first eviction, so that a restart after it rebuilds the held rooms
	// (defrag_record.go); a plan that cannot be recorded is not carried out.
	if err := p.writePlanRecord(ctx, pod, newPlanRecord(now, now.Add(p.replacementTimeout), target, opened, held, moved)); err != nil {
		release(held)
		p.setNomination(pod, "", nil, false)
		p.metrics.DefragRefused.WithLabelValues(DefragRefusedNotRecorded).Inc()
		return nil, "defragmentation (Evict): " + err.Error() + "; planning again"
	}

	evicted := 0
	for i, v := range moved {
		uid := v.UID
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}}
		if err := p.evict(ctx, ev); err != nil {
			// The rooms of the moves not made are released; those of the pods already evicted
			// stay held for their replacements, but for deferred ones (an Ordered plan): the
			// slices a deferred room waited for may be those of the moves not made, so their
			// replacements are placed by the policy instead of waiting for a room that may never
			// free. The target will not open: the pending pod's nomination goes, and it may be
			// planned for again.
			release(held[i:])
			var waiting []*pledge
			p.mu.Lock()
			for _, pl := range held[:i] {
				if pl.deferred {
					waiting = append(waiting, pl)
				}
			}
			p.mu.Unlock()
			release(waiting)
			p.setNomination(pod, "", nil, false)
			p.metrics.DefragRefused.WithLabelValues(DefragRefusedEviction).Inc()
			why := fmt.Sprintf("the eviction of pod %s/%s was refused: %v", v.Namespace, v.Name, err)
			p.mu.Lock()
			if p.defragRun.refused == nil {
				p.defragRun.refused = map[types.UID]refusal{}
			}
			p.defragRun.refused[pod.UID] = refusal{until: now.Add(defragRefusalBackoff), why: why}
			p.mu.Unlock()
			log.Info("defragmentation plan abandoned", "pod", klog.KObj(pod), "reason", why, "evicted", evicted)
			if evicted == 0 {
				p.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventDefragmentationAbandoned, "Evict", "plan abandoned before any eviction: %s", why)
				return nil, "defragmentation (Evict): plan abandoned, " + why
			}
			p.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventDefragmentationAbandoned, "Evict",
				"plan abandoned after %d eviction(s): %s; the evicted pods' replacements keep their rooms", evicted, why)
			return nil, "defragmentation (Evict): plan abandoned after " + fmt.Sprint(evicted) + " eviction(s), " + why
		}
		evicted++
		p.metrics.DefragEvictions.Inc()
		p.mu.Lock()
		p.defragRun.evictions = append(p.defragRun.evictions, now)
		p.mu.Unlock()
	}
	p.mu.Lock()
	if p.defragRun.plans == nil {
		p.defragRun.plans = map[types.UID]time.Time{}
	}
	p.defragRun.plans[pod.UID] = now.Add(p.replacementTimeout)
	p.mu.Unlock()
	p.recorder.Eventf(pod, nil, corev1.EventTypeNormal, EventDefragmentationEvicting, "Evict", "evicted %d pod(s): %s", evicted, words)
	log.V(2).Info("defragmentation plan carried out", "pod", klog.KObj(pod), "node", target, "evicted", evicted)
	return &fwk.PostFilterResult{NominatingInfo: &fwk.NominatingInfo{NominatedNodeName: target, NominatingMode: fwk.ModeOverride}},
		fmt.Sprintf("defragmentation (Evict): evicted %d pod(s) to open room on node %s: %s", evicted, target, words)
}

// evict posts the eviction once. A refusal is final for this plan: the Eviction API answers a
// PodDisruptionBudget that allows no disruption now (or is not yet processed) with 429 and a
// Retry-After, on which client-go would otherwise retry, up to ten times, within this
// scheduling cycle.
func (p *Plugin) evict(ctx context.Context, ev *policyv1.Eviction) error {
	return p.handle.ClientSet().PolicyV1().RESTClient().Post().AbsPath("/api/v1").
		Namespace(ev.Namespace).Resource("pods").Name(ev.Name).SubResource("eviction").
		Body(ev).MaxRetries(0).Do(ctx).Error()
}

// waitingPlan says, for a pod whose plan was carried out and has not timed out, what it waits
// for; "" when it has none.
func (p *Plugin) waitingPlan(pod *corev1.Pod) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.defragRun.refused[pod.UID]; ok {
		if p.clock().Before(r.until) {
			return fmt.Sprintf("defragmentation (Evict): the last plan was abandoned (%s); no new plan before %s",
				r.why, r.until.UTC().Format(time.RFC3339))
		}
		delete(p.defragRun.refused, pod.UID)
	}
	if _, ok := p.defragRun.plans[pod.UID]; !ok {
		return ""
	}
	var waits []string
	for _, pl := range p.defragRun.pledges {
		if pl.pending.UID == pod.UID {
			waits = append(waits, "a replacement of "+pl.moved)
		}
	}
	if len(waits) == 0 {
		return "defragmentation (Evict): waiting for the slices of the moved pods to be released"
	}
	return "defragmentation (Evict): waiting for " + strings.Join(waits, ", ")
}

// claimPledge gives a pod the destination held for it: a pod of the controller of a moved pod,
// asking for one slice of the moved profile, takes the pledge as its nomination. When the only
// such pledges are deferred (their room is still held by moved slices being released), the pod
// waits for them: it returns the status PreFilter answers, UnschedulableAndUnresolvable so that
// nothing is preempted for it.
func (p *Plugin) claimPledge(log klog.Logger, pod *corev1.Pod, s *podState) *fwk.Status {
	if len(s.slices) != 1 || len(s.adopted) > 0 {
		return nil
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return nil
	}
	p.mu.Lock()
	var found, waiting *pledge
	for _, pl := range p.defragRun.pledges {
		if pl.owner != owner.UID || pl.profile != s.slices[0] {
			continue
		}
		if pl.deferred {
			if waiting == nil || pl.key < waiting.key {
				waiting = pl
			}
		} else if found == nil || pl.key < found.key {
			found = pl
		}
	}
	if found != nil {
		p.dropPledgeLocked(found)
	}
	p.mu.Unlock()
	if found == nil {
		if waiting != nil {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("defragmentation holds room for this pod on node %s at %s, where the slices of the moved pods are being released",
				waiting.node, waiting.slot.Slot))
		}
		return nil
	}
	p.cache.Unreserve(found.key)
	p.setNomination(pod, found.node, []snapshot.Slot{found.slot}, false)
	log.V(2).Info("defragmentation: replacement takes its held room", "pod", klog.KObj(pod), "replaces", found.moved, "node", found.node, "slot", found.slot.Slot)
	return nil
}

// sweepDefrag drops the pledges whose replacement did not come in time (the room is released,
// the pending pod told) and the plans whose moves are over.
func (p *Plugin) sweepDefrag() {
	p.restored.Do(func() { p.restorePlans(p.log) })
	now := p.clock()
	p.mu.Lock()
	var late []*pledge
	for _, pl := range p.defragRun.pledges {
		if !now.Before(pl.deadline) {
			late = append(late, pl)
			p.dropPledgeLocked(pl)
		}
	}
	for uid, deadline := range p.defragRun.plans {
		if !now.Before(deadline) {
			delete(p.defragRun.plans, uid)
		}
	}
	for uid, r := range p.defragRun.refused {
		if !now.Before(r.until) {
			delete(p.defragRun.refused, uid)
		}
	}
	p.mu.Unlock()
	p.holdDeferred()
	for _, pl := range late {
		p.cache.Unreserve(pl.key)
		p.metrics.DefragRefused.WithLabelValues(DefragRefusedReplacementLate).Inc()
		p.recorder.Eventf(pl.pending, nil, corev1.EventTypeWarning, EventDefragmentationAbandoned, "Evict",
			"no replacement of %s arrived within %s: the room held for it on node %s is released", pl.moved, p.replacementTimeout, pl.node)
	}
}

// sliceOf is a mig.SliceAt of the snapshot nodes as a mig.Slot.
func sliceOf(nodes []*snapshot.Node, s mig.SliceAt) mig.Slot {
	return mig.Slot{GPU: nodes[s.Node].GPUs[s.GPU].UUID, Profile: s.Profile.Name, Placement: s.Placement}
}

// evictMode reports whether the policy carries plans out.
func (pol defragPolicy) evictMode() bool { return pol.mode == slicerv1alpha1.DefragmentationEvict }

// clock is the plugin's time (Plugin.now, time.Now when unset).
func (p *Plugin) clock() time.Time {
	if p.now == nil {
		return time.Now()
	}
	return p.now()
}
