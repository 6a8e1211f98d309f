package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// A plan carried out in Evict mode is written on its pending pod, as the pod condition
// slicer.dev/DefragmentationPlan whose message is the record, before the first eviction, so that
// a restarted scheduler rebuilds what it held in memory: the rooms held for the moved pods'
// replacements (pledges), the placement opened for the pending pod, that the pod waits for its
// moves, and the evictions counted against the cap (docs/design/defragmentation.md, "Across a
// restart"). A condition, not an annotation: it is written through pods/status, which the
// scheduler already may and a pod's owner may not, so a tenant cannot forge a record that makes
// a restarted scheduler hold rooms. A record is restored for no longer than a replacement
// timeout from the restart. Whoever may read the pending pod reads the record, so it names the
// moved pods and their controllers by digest only (podKey, ownerKey in tenant.go), and by name
// only those of the pending pod's own namespace.

// planRecord is what the condition's message holds.
type planRecord struct {
	// Evicted is when the evictions were posted (the cap's window counts them from it).
	Evicted  time.Time `json:"evicted"`
	Deadline time.Time `json:"deadline"`
	// Node and Target: where the plan opened room for the pending pod; Targets, for a plan
	// that opened whole GPUs, every one of them (Target is then the first).
	Node    string         `json:"node"`
	Target  recordedSlot   `json:"target"`
	Targets []recordedSlot `json:"targets,omitempty"`
	Moves   []recordMove   `json:"moves"`
}

// targets are the slots the record holds for the pending pod, each with its index among the
// pod's requests.
func (r planRecord) targets() []snapshot.Slot {
	if len(r.Targets) == 0 {
		return []snapshot.Slot{r.Target.slot()}
	}
	out := make([]snapshot.Slot, len(r.Targets))
	for i, t := range r.Targets {
		out[i] = t.slot()
		out[i].Index = int32(i)
	}
	return out
}

// recordedSlot is a mig.Slot in the record.
type recordedSlot struct {
	GPU     string `json:"gpu"`
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	Size    int    `json:"size"`
}

func recordSlot(s mig.Slot) recordedSlot {
	return recordedSlot{GPU: s.GPU, Profile: s.Profile, Start: s.Placement.Start, Size: s.Placement.Size}
}

func (r recordedSlot) slot() snapshot.Slot {
	return snapshot.Slot{Slot: mig.Slot{GPU: r.GPU, Profile: r.Profile, Placement: mig.Placement{Start: r.Start, Size: r.Size}}}
}

// recordMove is one move: the pod evicted and the room held for its replacement.
type recordMove struct {
	// Pod is the moved pod's namespace/name when it is of the pending pod's namespace (whose
	// tenant may read that pod anyway); "" for a pod of another namespace.
	Pod string `json:"pod,omitempty"`
	// PodKey and OwnerKey are the digests of the moved pod and of its controller (tenant.go).
	PodKey   string `json:"podKey,omitempty"`
	OwnerKey string `json:"ownerKey,omitempty"`
	// FromNode and From: where the moved pod's slice was; Node and To: the room held for its
	// replacement.
	FromNode string       `json:"fromNode,omitempty"`
	From     recordedSlot `json:"from"`
	Node     string       `json:"node"`
	To       recordedSlot `json:"to"`
	// UID and Owner are the moved pod's and its controller's UIDs, as the records of earlier
	// releases name them (with Pod for any namespace); read, never written.
	UID   types.UID `json:"uid,omitempty"`
	Owner types.UID `json:"owner,omitempty"`
}

// newPlanRecord is the record of a plan whose rooms are held, for a pending pod of namespace
// ns: the pledges, in move order.
func newPlanRecord(now, deadline time.Time, node string, targets []snapshot.Slot, ns string, held []*pledge) planRecord {
	rec := planRecord{Evicted: now, Deadline: deadline, Node: node, Target: recordSlot(targets[0].Slot)}
	if targets[0].Whole() {
		for _, t := range targets {
			rec.Targets = append(rec.Targets, recordSlot(t.Slot))
		}
	}
	for _, pl := range held {
		mv := recordMove{PodKey: pl.movedKey, OwnerKey: pl.ownerKey, FromNode: pl.fromNode, From: recordSlot(pl.from.Slot),
			Node: pl.node, To: recordSlot(pl.slot.Slot)}
		if inNamespace(ns, pl.moved) {
			mv.Pod = pl.moved
		}
		rec.Moves = append(rec.Moves, mv)
	}
	return rec
}

// planCondition is the pod condition that carries the record.
func planCondition(rec planRecord) (corev1.PodCondition, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return corev1.PodCondition{}, fmt.Errorf("encode the plan record: %w", err)
	}
	return corev1.PodCondition{Type: slicerv1alpha1.PodConditionDefragmentationPlan, Status: corev1.ConditionTrue,
		Reason: "Evicting", Message: string(data), LastTransitionTime: metav1.NewTime(rec.Evicted)}, nil
}

// writePlanRecord sets the condition on the pending pod (a strategic merge patch of its status
// that names the pod's UID, so that it fails rather than writes on another pod of the same name).
func (e *evictor) writePlanRecord(ctx context.Context, pod *corev1.Pod, rec planRecord) error {
	cond, err := planCondition(rec)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   map[string]any{"conditions": []corev1.PodCondition{cond}},
	})
	if err != nil {
		return fmt.Errorf("encode the plan record's patch: %w", err)
	}
	if _, err := e.handle.ClientSet().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("record the plan on pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// readPlanRecord returns the pod's plan record, if it has one. A move of an earlier release's
// record (UIDs, no digests) gets its digests from them.
func readPlanRecord(pod *corev1.Pod) (planRecord, bool, error) {
	var rec planRecord
	for _, c := range pod.Status.Conditions {
		if c.Type != slicerv1alpha1.PodConditionDefragmentationPlan {
			continue
		}
		if err := json.Unmarshal([]byte(c.Message), &rec); err != nil {
			return rec, true, fmt.Errorf("decode the plan record: %w", err)
		}
		for i := range rec.Moves {
			if mv := &rec.Moves[i]; mv.PodKey == "" && mv.UID != "" {
				ns, _, _ := strings.Cut(mv.Pod, "/")
				mv.PodKey, mv.OwnerKey = podKey(mv.UID), ownerKey(ns, mv.Owner)
			}
		}
		return rec, true, nil
	}
	return rec, false, nil
}

// restorePlans rebuilds Evict mode's state from the plan records of the pods that have one, bound
// or not: the rooms held for the moved pods' replacements outlive the pending pod's wait (it
// binds as soon as its room opens, while the replacements may come later). It runs once, at the
// first PreFilter (the informers are synced by then).
func (e *evictor) restorePlans(log klog.Logger) {
	if !e.policy.evictMode() {
		return
	}
	pods, err := e.pods.List(labels.Everything())
	if err != nil {
		log.Error(err, "defragmentation: list pods to restore plan records")
		return
	}
	now := e.clock()
	for _, pod := range pods {
		rec, ok, err := readPlanRecord(pod)
		if !ok {
			continue
		}
		if err != nil {
			log.Info("defragmentation: ignoring an unreadable plan record", "pod", klog.KObj(pod), "err", err)
			continue
		}
		if why := trustRecord(rec, now); why != "" {
			log.V(2).Info("defragmentation: plan record not restored", "pod", klog.KObj(pod), "why", why)
			continue
		}
		if limit := now.Add(e.replacementTimeout); rec.Deadline.After(limit) {
			rec.Deadline = limit
		}
		e.restorePlan(log, pod, rec)
	}
}

// trustRecord says why a record is not restored ("" when it is).
func trustRecord(rec planRecord, now time.Time) string {
	switch {
	case !now.Before(rec.Deadline):
		return "its moves' time is over"
	case rec.Node == "" || len(rec.Moves) == 0:
		return "it names no node or no moves"
	}
	return ""
}

// restorePlan rebuilds one record. A move whose pod is still there and not being deleted was
// never evicted (the scheduler stopped between the record and that eviction): the plan was cut
// short, as one whose eviction is refused is (defrag_evict.go), so the pending pod gets no
// nomination and only the evicted pods' rooms that are free are held. A room that is not free is
// held deferred (snapshot.Cache.HoldWhenFree) only when every slice in it is a moved pod's of the
// plan (an Ordered plan's slices not yet released); otherwise its replacement took it before the
// restart, or it is lost, and the replacement is placed by the policy. A pending pod that is
// bound, or being deleted, gets no nomination; the rooms of its moves are held all the same.
func (e *evictor) restorePlan(log klog.Logger, pod *corev1.Pod, rec planRecord) {
	moved := map[string]bool{} // the moved pods' podKeys
	evicted := make([]bool, len(rec.Moves))
	cut := false
	for i, mv := range rec.Moves {
		moved[mv.PodKey] = true
		evicted[i] = !e.stillThere(mv)
		cut = cut || !evicted[i]
	}
	restored := 0
	for i, mv := range rec.Moves {
		if !evicted[i] {
			continue
		}
		e.mu.Lock()
		e.run.evictions = append(e.run.evictions, rec.Evicted)
		e.mu.Unlock()
		pl := &pledge{key: e.newPledgeKey(), ownerKey: mv.OwnerKey, movedKey: mv.PodKey, profile: mv.To.Profile,
			node: mv.Node, slot: mv.To.slot(), fromNode: mv.FromNode, from: mv.From.slot(), moved: mv.Pod,
			pending: pod, deadline: rec.Deadline}
		if !inNamespace(pod.Namespace, pl.moved) {
			pl.moved = "" // an earlier release's record names pods of any namespace
		}
		err := e.cache.Reserve(pl.reservation())
		if err != nil && !cut && e.heldByMoved(mv.Node, pl.slot.Slot, moved) {
			_, err = e.cache.HoldWhenFree(pl.reservation())
		}
		if err != nil {
			continue
		}
		e.addPledge(pl)
		restored++
	}
	waits := !cut && pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil
	if waits {
		e.mu.Lock()
		if e.run.plans == nil {
			e.run.plans = map[types.UID]time.Time{}
		}
		e.run.plans[pod.UID] = rec.Deadline
		e.mu.Unlock()
		e.held.set(pod, rec.Node, rec.targets(), byPlan, rec.Deadline)
	}
	log.Info("defragmentation: plan restored from its record", "pod", klog.KObj(pod), "node", rec.Node,
		"moves", len(rec.Moves), "roomsHeld", restored, "cutShort", cut, "podWaits", waits)
}

// heldByMoved reports whether the slices that overlap slot on node are all the moved pods' of a
// plan (moved: their podKeys), and there is one at least.
func (e *evictor) heldByMoved(node string, slot mig.Slot, moved map[string]bool) bool {
	found := false
	for _, c := range e.cache.Claims(node)[slot.GPU] {
		if !c.Slot.Overlaps(slot) {
			continue
		}
		if c.PodUID == "" || !moved[podKey(c.PodUID)] {
			return false
		}
		found = true
	}
	return found
}

// stillThere reports whether the move's pod was never evicted: its slice is still where the
// record says it was, held by the pod the record names (by digest), which the informer shows not
// being deleted. An earlier release's record names the pod instead of its slice.
func (e *evictor) stillThere(mv recordMove) bool {
	ns, name, _ := strings.Cut(mv.Pod, "/")
	uid := mv.UID
	if mv.FromNode != "" {
		c, ok := e.cache.ClaimAt(mv.FromNode, mv.From.slot().Slot)
		if !ok || c.PodUID == "" || podKey(c.PodUID) != mv.PodKey {
			return false
		}
		ns, name, _ = strings.Cut(c.Pod, "/")
		uid = c.PodUID
	}
	cur, err := e.pods.Pods(ns).Get(name)
	return err == nil && uid != "" && cur.UID == uid && cur.DeletionTimestamp == nil
}
