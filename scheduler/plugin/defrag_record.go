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
// timeout from the restart.

// planRecord is what the condition's message holds.
type planRecord struct {
	// Evicted is when the evictions were posted (the cap's window counts them from it).
	Evicted  time.Time `json:"evicted"`
	Deadline time.Time `json:"deadline"`
	// Node and Target: where the plan opened room for the pending pod.
	Node   string       `json:"node"`
	Target recordedSlot `json:"target"`
	Moves  []recordMove `json:"moves"`
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
	Pod   string       `json:"pod"` // namespace/name
	UID   types.UID    `json:"uid"`
	Owner types.UID    `json:"owner"` // its controller
	Node  string       `json:"node"`
	To    recordedSlot `json:"to"`
}

// newPlanRecord is the record of a plan whose rooms are held: the pledges, in move order.
func newPlanRecord(now, deadline time.Time, node string, target mig.Slot, held []*pledge, moved []*corev1.Pod) planRecord {
	rec := planRecord{Evicted: now, Deadline: deadline, Node: node, Target: recordSlot(target)}
	for i, pl := range held {
		rec.Moves = append(rec.Moves, recordMove{Pod: pl.moved, UID: moved[i].UID, Owner: pl.owner, Node: pl.node, To: recordSlot(pl.slot.Slot)})
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
func (p *Plugin) writePlanRecord(ctx context.Context, pod *corev1.Pod, rec planRecord) error {
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
	if _, err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("record the plan on pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// readPlanRecord returns the pod's plan record, if it has one.
func readPlanRecord(pod *corev1.Pod) (planRecord, bool, error) {
	var rec planRecord
	for _, c := range pod.Status.Conditions {
		if c.Type == slicerv1alpha1.PodConditionDefragmentationPlan {
			if err := json.Unmarshal([]byte(c.Message), &rec); err != nil {
				return rec, true, fmt.Errorf("decode the plan record: %w", err)
			}
			return rec, true, nil
		}
	}
	return rec, false, nil
}

// restorePlans rebuilds Evict mode's state from the plan records of the pods still waiting for
// their moves. It runs once, at the first PreFilter (the informers are synced by then).
func (p *Plugin) restorePlans(log klog.Logger) {
	if !p.defrag.evictMode() {
		return
	}
	pods, err := p.pods.List(labels.Everything())
	if err != nil {
		log.Error(err, "defragmentation: list pods to restore plan records")
		return
	}
	now := p.clock()
	for _, pod := range pods {
		if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
			continue
		}
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
		if limit := now.Add(p.replacementTimeout); rec.Deadline.After(limit) {
			rec.Deadline = limit
		}
		p.restorePlan(log, pod, rec)
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
// held (deferred) only when a moved pod of the plan still holds it; otherwise its replacement
// took it before the restart, or it is lost, and the replacement is placed by the policy.
func (p *Plugin) restorePlan(log klog.Logger, pod *corev1.Pod, rec planRecord) {
	movedUIDs := map[types.UID]bool{}
	evicted := make([]bool, len(rec.Moves))
	cut := false
	for i, mv := range rec.Moves {
		movedUIDs[mv.UID] = true
		ns, name, _ := strings.Cut(mv.Pod, "/")
		cur, err := p.pods.Pods(ns).Get(name)
		evicted[i] = err != nil || cur.UID != mv.UID || cur.DeletionTimestamp != nil
		cut = cut || !evicted[i]
	}
	restored := 0
	for i, mv := range rec.Moves {
		if !evicted[i] {
			continue
		}
		p.mu.Lock()
		p.defragRun.evictions = append(p.defragRun.evictions, rec.Evicted)
		p.mu.Unlock()
		pl := &pledge{key: p.newPledgeKey(), owner: mv.Owner, profile: mv.To.Profile, node: mv.Node, slot: mv.To.slot(),
			moved: mv.Pod, movedUID: mv.UID, pending: pod, deadline: rec.Deadline}
		if p.cache.Reserve(pl.reservation()) != nil {
			claim, ok := p.cache.ClaimAt(mv.Node, pl.slot.Slot)
			if cut || !ok || !movedUIDs[claim.PodUID] {
				continue
			}
			pl.deferred = true
		}
		p.addPledge(pl)
		restored++
	}
	if !cut {
		p.mu.Lock()
		if p.defragRun.plans == nil {
			p.defragRun.plans = map[types.UID]time.Time{}
		}
		p.defragRun.plans[pod.UID] = rec.Deadline
		p.mu.Unlock()
		p.setNomination(pod, rec.Node, []snapshot.Slot{rec.Target.slot()}, false)
	}
	log.Info("defragmentation: plan restored from its record", "pod", klog.KObj(pod), "node", rec.Node,
		"moves", len(rec.Moves), "roomsHeld", restored, "cutShort", cut)
}
