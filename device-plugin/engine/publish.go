package engine

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// DefaultPublishInterval is the least time between two NodeAccelerator status writes that
// only move slices (NewStatusWriter's every).
const DefaultPublishInterval = time.Second

// statusChange classifies how a NodeAccelerator status differs from the one in the API.
type statusChange int

const (
	// changeNone: nothing to write.
	changeNone statusChange = iota
	// changeSlices: slices appeared or changed state or holder. The scheduler already
	// counts each one through its allocation, so the write can wait.
	changeSlices
	// changeFreesRoom: a slice is gone. The scheduler keeps its room taken while the
	// status shows it (scheduler/snapshot/freed.go), so the write goes at once unless
	// another went out within the interval.
	changeFreesRoom
	// changeUrgent: conditions, the driver, the GPUs' health or MIG mode, or the set of
	// GPUs changed. Always written at once: the scheduler must stop (or start) placing on
	// the node, and users read these.
	changeUrgent
)

// classify compares the rendered status with the one in the API (pure).
func classify(old, st slicerv1alpha1.NodeAcceleratorStatus) statusChange {
	if equality.Semantic.DeepEqual(old, st) {
		return changeNone
	}
	if !equality.Semantic.DeepEqual(withoutSlices(old), withoutSlices(st)) {
		return changeUrgent
	}
	have := map[string]bool{}
	for _, g := range st.GPUs {
		for _, s := range g.Slices {
			have[migSliceKey(g.UUID, s)] = true
		}
	}
	for _, g := range old.GPUs {
		for _, s := range g.Slices {
			if !have[migSliceKey(g.UUID, s)] {
				return changeFreesRoom
			}
		}
	}
	return changeSlices
}

func withoutSlices(st slicerv1alpha1.NodeAcceleratorStatus) slicerv1alpha1.NodeAcceleratorStatus {
	out := *st.DeepCopy()
	for i := range out.GPUs {
		out.GPUs[i].Slices = nil
	}
	return out
}

func migSliceKey(gpu string, s slicerv1alpha1.MIGSlice) string {
	return fmt.Sprintf("%s/%s@%d+%d/gi%d", gpu, s.Profile, s.Placement.Start, s.Placement.Size, s.GPUInstanceID)
}

// publishClock coalesces NodeAccelerator status writes: at most one write that only moves
// slices per interval, whatever the churn. A status that only gained slices is written at
// the end of an interval that starts when the change is first seen, so it never sits
// between a slice's Ready and its pod's binding; one that lost a slice is written at once
// when the last write is an interval old, else at the end of that interval; urgent changes
// go at once.
type publishClock struct {
	last, due time.Time
}

// wait returns how long a change of kind k waits before it is written (0: now).
func (c *publishClock) wait(k statusChange, now time.Time, every time.Duration) time.Duration {
	switch {
	case k == changeNone:
		// Nothing to write; a deadline still ahead stays, so a change seen next waits no
		// longer than the first one of the interval.
		if !now.Before(c.due) {
			c.due = time.Time{}
		}
		return 0
	case k == changeUrgent, every <= 0:
		return 0
	case !c.due.IsZero() && !now.Before(c.due):
		return 0
	}
	next := c.last.Add(every)
	if k == changeFreesRoom && !now.Before(next) {
		return 0
	}
	due := now.Add(every)
	if k == changeFreesRoom {
		due = next
	}
	if c.due.IsZero() || due.Before(c.due) {
		c.due = due
	}
	return c.due.Sub(now)
}

func (c *publishClock) wrote(now time.Time) {
	c.last, c.due = now, time.Time{}
}

// StatusWriter writes one node's NodeAccelerator status for either frontend: the status
// rendered by renderStatus, written when it changed, coalesced by publishClock, never from a
// cached copy older than its own last write. Not safe for concurrent use: the caller
// serializes its calls (the Reconciler and the DRA driver hold their locks).
type StatusWriter struct {
	client   client.Client
	recorder events.EventRecorder
	node     string
	// every is the least time between two writes that only move slices.
	every time.Duration
	now   func() time.Time
	clock publishClock
	// replacedRV is the NodeAccelerator resourceVersion the last status write replaced (see
	// Publish).
	replacedRV string
	// metrics, when set, observe the mode switches each write shows done (WithMetrics).
	metrics *Metrics
}

// WithMetrics makes w observe, on each status write, the duration of the MIG mode switches
// the new status shows done (slicer_agent_gpu_mode_switch_duration_seconds): those the status
// it replaces showed pending, and those the view says SetMIGMode made current at once. It
// returns w.
func (w *StatusWriter) WithMetrics(m *Metrics) *StatusWriter {
	w.metrics = m
	return w
}

// NewStatusWriter returns a writer for node's NodeAccelerator through c (created when
// absent). every is the least time between two writes that only move slices (0 is
// DefaultPublishInterval, negative is no coalescing); now is the clock (nil: time.Now);
// events go to rec (may be nil).
func NewStatusWriter(c client.Client, rec events.EventRecorder, node string, every time.Duration, now func() time.Time) *StatusWriter {
	if every == 0 {
		every = DefaultPublishInterval
	}
	if now == nil {
		now = time.Now
	}
	return &StatusWriter{client: c, recorder: rec, node: node, every: every, now: now}
}

// Publish creates the node's NodeAccelerator if needed and writes its status when it
// changed, coalesced by publishClock. It returns how long a pending write waits (0: none
// pending); the caller publishes again by then.
func (w *StatusWriter) Publish(ctx context.Context, v NodeView) (time.Duration, error) {
	var na slicerv1alpha1.NodeAccelerator
	err := w.client.Get(ctx, types.NamespacedName{Name: w.node}, &na)
	if apierrors.IsNotFound(err) {
		na = slicerv1alpha1.NodeAccelerator{
			ObjectMeta: metav1.ObjectMeta{Name: w.node},
			Spec:       slicerv1alpha1.NodeAcceleratorSpec{NodeName: w.node},
		}
		if err := w.client.Create(ctx, &na); err != nil {
			return 0, fmt.Errorf("create NodeAccelerator: %w", err)
		}
	} else if err != nil {
		return 0, fmt.Errorf("get NodeAccelerator: %w", err)
	}
	if na.ResourceVersion != "" && na.ResourceVersion == w.replacedRV {
		// The cached copy predates the agent's own last write (the watch has not delivered it
		// yet): a write from it would only conflict. The watch event of that write brings
		// the next reconcile. (A client that reads from the API server never gets here.)
		return 0, nil
	}
	now := w.now()
	st := renderStatus(na.Status, na.Generation, v, now)
	k := classify(na.Status, st)
	if wait := w.clock.wait(k, now, w.every); k == changeNone || wait > 0 {
		return wait, nil
	}
	wasConflict := hasTrue(na.Status.Conditions, slicerv1alpha1.ConditionOwnershipConflict)
	wasDriverDown := hasTrue(na.Status.Conditions, slicerv1alpha1.ConditionDriverNotReady)
	patch := client.MergeFromWithOptions(na.DeepCopy(), client.MergeFromWithOptimisticLock{})
	replaced, old := na.ResourceVersion, na.Status
	na.Status = st
	if err := w.client.Status().Patch(ctx, &na, patch); err != nil {
		return 0, fmt.Errorf("NodeAccelerator status: %w", err)
	}
	w.replacedRV = replaced
	w.clock.wrote(now)
	if w.metrics != nil {
		w.metrics.modeSwitchesDone(old, st, v.ModeSwitchesDone, now)
	}
	if v.Conflict.Present() && !wasConflict {
		Emit(w.recorder, &na, corev1.EventTypeWarning, v.Conflict.Reason, "%s", v.Conflict.Message)
	}
	if v.DriverErr != nil && !wasDriverDown {
		Emit(w.recorder, &na, corev1.EventTypeWarning, slicerv1alpha1.ReasonNVMLUnavailable, "%s", v.DriverErr.Error())
	}
	return 0, nil
}

// Emit records an event on obj (none without a recorder).
func Emit(rec events.EventRecorder, obj client.Object, typ, reason, format string, args ...any) {
	if rec != nil && obj != nil {
		rec.Eventf(obj, nil, typ, reason, "Reconcile", format, args...)
	}
}

func hasTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
