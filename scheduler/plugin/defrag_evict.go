package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/events"
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
// destination may be where another moved pod's slice still is: its pledge is deferred, a
// reservation the snapshot takes itself in the change that releases those slices
// (snapshot.Cache.HoldWhenFree), so no pod placed in between takes the room; a replacement
// whose pledge is still deferred waits for it. Then
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
	key types.UID // the reservation's key in the snapshot cache
	// ownerKey and movedKey name the moved pod's controller (with the moved pod's namespace)
	// and the moved pod by digest (tenant.go): what its replacement must match, the same whether
	// the pledge was made here or read back from a plan record after a restart.
	ownerKey, movedKey string
	profile            string
	// node and slot: the room held; fromNode and from: where the moved pod's slice was.
	node, fromNode string
	slot, from     snapshot.Slot
	// moved is the moved pod's namespace/name; "" when it was read back from a record that
	// does not name it (a pod of another namespace than the pending pod's).
	moved    string
	pending  *corev1.Pod // the pod the plan was made for
	deadline time.Time
}

// evictor carries plans out in Evict mode. It owns what that holds: the pledges, the plans under
// way, the refusals, the evictions counted against the cap, and the plan records that rebuild
// them after a restart (defrag_record.go); it writes the pods' rooms to the shared nominations.
type evictor struct {
	handle   fwk.Handle // the Eviction API and the pods/status writes
	cache    *snapshot.Cache
	held     *nominations
	pods     corelisters.PodLister
	recorder events.EventRecorder
	metrics  *Metrics
	log      logr.Logger
	policy   defragPolicy
	// replacementTimeout bounds how long a room is held; now is the clock (nil: time.Now).
	replacementTimeout time.Duration
	now                func() time.Time
	restored           sync.Once // the plan records restored (defrag_record.go)

	mu  sync.Mutex
	run defragRun
}

// defragRun is the state of Evict mode, guarded by evictor.mu.
type defragRun struct {
	pledges map[types.UID]*pledge
	// plans maps a pending pod to the deadline of the moves made for it.
	plans map[types.UID]time.Time
	// refused maps a pending pod whose plan an eviction refusal abandoned to the end of its
	// backoff (defragRefusalBackoff) and what it was told.
	refused   map[types.UID]refusal
	evictions []time.Time
	seq       int
}

// reservation is the snapshot reservation that holds the pledge's room, named after the moved
// pod (its namespace, "replacement of <name>"; of no namespace when the name is not known).
func (pl *pledge) reservation() *snapshot.Reservation {
	ns, name, _ := strings.Cut(pl.moved, "/")
	if name == "" {
		name = "a moved pod"
	}
	return &snapshot.Reservation{PodUID: pl.key, Namespace: ns, PodName: "replacement of " + name,
		NodeName: pl.node, Slots: []snapshot.Slot{pl.slot}}
}

// movedFor words the moved pod for the tenant of namespace ns (podFor).
func (pl *pledge) movedFor(ns string) string {
	if pl.moved == "" {
		return "a pod of another namespace"
	}
	return podFor(ns, pl.moved)
}

// newPledgeKey is a pledge's reservation key, which no pod has.
func (e *evictor) newPledgeKey() types.UID {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.run.seq++
	return types.UID(fmt.Sprintf("defrag-pledge-%d", e.run.seq))
}

// addPledge keeps a pledge, held or deferred.
func (e *evictor) addPledge(pl *pledge) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.run.pledges == nil {
		e.run.pledges = map[types.UID]*pledge{}
	}
	e.run.pledges[pl.key] = pl
}

// dropPledgeLocked forgets a pledge; e.mu held.
func (e *evictor) dropPledgeLocked(pl *pledge) {
	delete(e.run.pledges, pl.key)
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

// execute carries out a plan for pod: hold every room, then evict. targets are the slots the
// plan opens for the pod (one slice, or its whole GPUs). It returns the result that nominates
// the pod to the target node (nil when nothing was evicted) and the words for its Pending
// reason.
func (e *evictor) execute(ctx context.Context, pod *corev1.Pod, nodes []*snapshot.Node, plan mig.DefragPlan, targets []snapshot.Slot, m *movableIndex, words string) (*fwk.PostFilterResult, string) {
	now := e.clock()
	log := klog.FromContext(ctx)
	moved := make([]*corev1.Pod, len(plan.Moves))
	for i, mv := range plan.Moves {
		moved[i] = m.podAt(mv.From)
		if moved[i] == nil {
			return nil, "defragmentation (Evict): a moved pod is no longer known; planning again"
		}
	}
	e.mu.Lock()
	window := time.Duration(e.policy.windowSeconds) * time.Second
	var admitted bool
	e.run.evictions, admitted = mig.EvictionCap{Max: e.policy.maxEvictions, Window: window}.Admit(e.run.evictions, now, len(plan.Moves))
	capped := !admitted
	e.mu.Unlock()
	if capped {
		e.metrics.DefragRefused.WithLabelValues(DefragRefusedEvictionCap).Inc()
		return nil, fmt.Sprintf("defragmentation (Evict) waits: the plan's %d eviction(s) would pass the cap of %d per %s (%s)",
			len(plan.Moves), e.policy.maxEvictions, window, words)
	}

	// Hold every destination, then the target, before anything is evicted.
	var held []*pledge
	release := func(ps []*pledge) {
		for _, pl := range ps {
			e.cache.Unreserve(pl.key)
			e.mu.Lock()
			e.dropPledgeLocked(pl)
			e.mu.Unlock()
		}
	}
	for i, mv := range plan.Moves {
		owner := metav1.GetControllerOf(moved[i])
		pl := &pledge{key: e.newPledgeKey(), ownerKey: ownerKey(moved[i].Namespace, owner.UID), movedKey: podKey(moved[i].UID),
			profile: mv.From.Profile.Name, node: nodes[mv.To.Node].Name, slot: snapshot.Slot{Slot: sliceOf(nodes, mv.To)},
			fromNode: nodes[mv.From.Node].Name, from: snapshot.Slot{Slot: sliceOf(nodes, mv.From)},
			moved: moved[i].Namespace + "/" + moved[i].Name, pending: pod, deadline: now.Add(e.replacementTimeout)}
		err := e.cache.Reserve(pl.reservation())
		if err != nil && plan.Ordered && freedByMoves(nodes, plan, i) {
			// The plan's own moved slices hold it: the snapshot holds it once they are gone.
			_, err = e.cache.HoldWhenFree(pl.reservation())
		}
		if err != nil {
			release(held)
			e.metrics.DefragRefused.WithLabelValues(DefragRefusedRoomTaken).Inc()
			return nil, "defragmentation (Evict): a destination was taken before it could be held (" + err.Error() + "); planning again"
		}
		e.addPledge(pl)
		held = append(held, pl)
	}
	target := nodes[plan.Target.Node].Name
	e.held.set(pod, target, targets, byPlan, now.Add(e.replacementTimeout))
	// Written before the first eviction, so that a restart after it rebuilds the held rooms
	// (defrag_record.go); a plan that cannot be recorded is not carried out.
	if err := e.writePlanRecord(ctx, pod, newPlanRecord(now, now.Add(e.replacementTimeout), target, targets, pod.Namespace, held)); err != nil {
		release(held)
		e.held.forget(pod.UID, "")
		e.metrics.DefragRefused.WithLabelValues(DefragRefusedNotRecorded).Inc()
		return nil, "defragmentation (Evict): " + err.Error() + "; planning again"
	}

	evicted := 0
	for i, v := range moved {
		uid := v.UID
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}}
		if err := e.evict(ctx, ev); err != nil {
			// The rooms of the moves not made are released; those of the pods already evicted
			// stay held for their replacements, but for deferred ones (an Ordered plan): the
			// slices a deferred room waited for may be those of the moves not made, so their
			// replacements are placed by the policy instead of waiting for a room that may never
			// free. The target will not open: the pending pod's nomination goes, and it may be
			// planned for again.
			release(held[i:])
			var waiting []*pledge
			for _, pl := range held[:i] {
				if e.cache.Waiting(pl.key) {
					waiting = append(waiting, pl)
				}
			}
			release(waiting)
			e.held.forget(pod.UID, "")
			e.metrics.DefragRefused.WithLabelValues(DefragRefusedEviction).Inc()
			why := fmt.Sprintf("the eviction of %s was refused: %s", podFor(pod.Namespace, v.Namespace+"/"+v.Name),
				refusalFor(pod.Namespace, v.Namespace, err))
			e.mu.Lock()
			if e.run.refused == nil {
				e.run.refused = map[types.UID]refusal{}
			}
			e.run.refused[pod.UID] = refusal{until: now.Add(defragRefusalBackoff), why: why}
			e.mu.Unlock()
			log.Info("defragmentation plan abandoned", "pod", klog.KObj(pod), "refused", klog.KObj(v), "err", err, "evicted", evicted)
			if evicted == 0 {
				e.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventDefragmentationAbandoned, "Evict", "plan abandoned before any eviction: %s", why)
				return nil, "defragmentation (Evict): plan abandoned, " + why
			}
			e.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventDefragmentationAbandoned, "Evict",
				"plan abandoned after %d eviction(s): %s; the evicted pods' replacements keep their rooms", evicted, why)
			return nil, "defragmentation (Evict): plan abandoned after " + fmt.Sprint(evicted) + " eviction(s), " + why
		}
		evicted++
		e.metrics.DefragEvictions.Inc()
		e.mu.Lock()
		e.run.evictions = append(e.run.evictions, now)
		e.mu.Unlock()
	}
	e.mu.Lock()
	if e.run.plans == nil {
		e.run.plans = map[types.UID]time.Time{}
	}
	e.run.plans[pod.UID] = now.Add(e.replacementTimeout)
	e.mu.Unlock()
	e.recorder.Eventf(pod, nil, corev1.EventTypeNormal, EventDefragmentationEvicting, "Evict", "evicted %d pod(s): %s", evicted, words)
	log.V(2).Info("defragmentation plan carried out", "pod", klog.KObj(pod), "node", target, "evicted", evicted)
	return &fwk.PostFilterResult{NominatingInfo: &fwk.NominatingInfo{NominatedNodeName: target, NominatingMode: fwk.ModeOverride}},
		fmt.Sprintf("defragmentation (Evict): evicted %d pod(s) to open room on node %s: %s", evicted, target, words)
}

// refusalFor words an eviction refused by the apiserver (err) for the tenant of namespace ns, of
// a pod of namespace victimNS: the API's answer as it is for a pod of ns; for another
// namespace's pod only what kind of refusal it was and whose namespace's budget refused (the
// answer names the budget and counts its pods).
func refusalFor(ns, victimNS string, err error) string {
	if ns == victimNS {
		return err.Error()
	}
	if apierrors.IsTooManyRequests(err) {
		return "a PodDisruptionBudget of namespace " + victimNS + " allows no disruption now (429)"
	}
	return fmt.Sprintf("the API answered %s (%d)", apierrors.ReasonForError(err), statusCode(err))
}

// statusCode is the HTTP status of an API error, 0 for another error.
func statusCode(err error) int32 {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return st.Status().Code
	}
	return 0
}

// evict posts the eviction once. A refusal is final for this plan: the Eviction API answers a
// PodDisruptionBudget that allows no disruption now (or is not yet processed) with 429 and a
// Retry-After, on which client-go would otherwise retry, up to ten times, within this
// scheduling cycle.
func (e *evictor) evict(ctx context.Context, ev *policyv1.Eviction) error {
	return e.handle.ClientSet().PolicyV1().RESTClient().Post().AbsPath("/api/v1").
		Namespace(ev.Namespace).Resource("pods").Name(ev.Name).SubResource("eviction").
		Body(ev).MaxRetries(0).Do(ctx).Error()
}

// waitingPlan says, for a pod whose plan was carried out and has not timed out, what it waits
// for; "" when it has none.
func (e *evictor) waitingPlan(pod *corev1.Pod) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.run.refused[pod.UID]; ok {
		if e.clock().Before(r.until) {
			return fmt.Sprintf("defragmentation (Evict): the last plan was abandoned (%s); no new plan before %s",
				r.why, r.until.UTC().Format(time.RFC3339))
		}
		delete(e.run.refused, pod.UID)
	}
	if _, ok := e.run.plans[pod.UID]; !ok {
		return ""
	}
	var waits []string
	for _, pl := range e.run.pledges {
		if pl.pending.UID == pod.UID {
			waits = append(waits, "a replacement of "+pl.movedFor(pod.Namespace))
		}
	}
	if len(waits) == 0 {
		return "defragmentation (Evict): waiting for the slices of the moved pods to be released"
	}
	return "defragmentation (Evict): waiting for " + strings.Join(waits, ", ")
}

// replacedBy reports whether a pod may be the replacement the pledge holds room for: a pod of
// the moved pod's namespace whose controller is the moved pod's (owner: ownerKey of the pod's
// namespace and controller), other than the moved pod (movedKey: podKey of its UID), asking for
// one slice of the moved profile. The namespace is what a tenant cannot forge: a pod's owner
// references are written by whoever creates it, but a controller recreates its pods in its own
// namespace (the garbage collector ignores an owner reference to another namespace's object), so
// a pod of another namespace naming the controller's UID is never its replacement.
func (pl *pledge) replacedBy(owner, moved, profile string) bool {
	return owner == pl.ownerKey && moved != pl.movedKey && profile == pl.profile
}

// claim gives a pod the destination held for it: a moved pod's replacement (replacedBy)
// takes the pledge as its nomination. When the only such pledges are deferred (their room is
// still held by moved slices being released), the pod waits for them: it returns the status
// PreFilter answers, UnschedulableAndUnresolvable so that nothing is preempted for it.
func (e *evictor) claim(log klog.Logger, pod *corev1.Pod, s *podState) *fwk.Status {
	if len(s.slices) != 1 || len(s.adopted) > 0 {
		return nil
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return nil
	}
	ownedBy, me := ownerKey(pod.Namespace, owner.UID), podKey(pod.UID)
	e.mu.Lock()
	var found, waiting *pledge
	for _, pl := range e.run.pledges {
		if !pl.replacedBy(ownedBy, me, s.slices[0]) {
			continue
		}
		if e.cache.Waiting(pl.key) {
			if waiting == nil || pl.key < waiting.key {
				waiting = pl
			}
		} else if found == nil || pl.key < found.key {
			found = pl
		}
	}
	if found != nil {
		e.dropPledgeLocked(found)
	}
	e.mu.Unlock()
	if found == nil {
		if waiting != nil {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("defragmentation holds room for this pod on node %s at %s, where the slices of the moved pods are being released",
				waiting.node, waiting.slot.Slot))
		}
		return nil
	}
	e.cache.Unreserve(found.key)
	e.held.set(pod, found.node, []snapshot.Slot{found.slot}, byReplacement, time.Time{})
	log.V(2).Info("defragmentation: replacement takes its held room", "pod", klog.KObj(pod), "replaces", found.movedFor(pod.Namespace), "node", found.node, "slot", found.slot.Slot)
	return nil
}

// sweep drops the pledges whose replacement did not come in time (the room is released,
// the pending pod told) and the plans whose moves are over.
func (e *evictor) sweep() {
	e.restored.Do(func() { e.restorePlans(e.log) })
	now := e.clock()
	e.mu.Lock()
	var late []*pledge
	for _, pl := range e.run.pledges {
		if !now.Before(pl.deadline) {
			late = append(late, pl)
			e.dropPledgeLocked(pl)
		}
	}
	for uid, deadline := range e.run.plans {
		if !now.Before(deadline) {
			delete(e.run.plans, uid)
		}
	}
	for uid, r := range e.run.refused {
		if !now.Before(r.until) {
			delete(e.run.refused, uid)
		}
	}
	e.mu.Unlock()
	for _, pl := range late {
		e.cache.Unreserve(pl.key)
		e.metrics.DefragRefused.WithLabelValues(DefragRefusedReplacementLate).Inc()
		e.recorder.Eventf(pl.pending, nil, corev1.EventTypeWarning, EventDefragmentationAbandoned, "Evict",
			"no replacement of %s arrived within %s: the room held for it on node %s is released", pl.movedFor(pl.pending.Namespace), e.replacementTimeout, pl.node)
	}
}

// sliceOf is a mig.SliceAt of the snapshot nodes as a mig.Slot.
func sliceOf(nodes []*snapshot.Node, s mig.SliceAt) mig.Slot {
	return mig.Slot{GPU: nodes[s.Node].GPUs[s.GPU].UUID, Profile: s.Profile.Name, Placement: s.Placement}
}

// evictMode reports whether the policy carries plans out.
func (pol defragPolicy) evictMode() bool { return pol.mode == slicerv1alpha1.DefragmentationEvict }

// clock is the evictor's time (evictor.now, time.Now when unset).
func (e *evictor) clock() time.Time {
	if e.now == nil {
		return time.Now()
	}
	return e.now()
}

// forget drops the pod's plan wait and refusal: it is bound or gone. The rooms its plan holds
// for the moved pods' replacements stay.
func (e *evictor) forget(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.run.plans, uid)
	delete(e.run.refused, uid)
}
