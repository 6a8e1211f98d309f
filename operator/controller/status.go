package controller

import (
	"errors"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// componentConditions must all be True for the installation to be Available.
var componentConditions = []string{
	slicerv1alpha1.ConditionKubernetesVersionSupported,
	slicerv1alpha1.ConditionNodeFeatureRuleReady,
	slicerv1alpha1.ConditionDriverReady,
	slicerv1alpha1.ConditionWebhookAvailable,
	slicerv1alpha1.ConditionSchedulerAvailable,
	slicerv1alpha1.ConditionAgentAvailable,
}

// status is the status being computed in one reconcile. It starts from a
// copy of the stored conditions only so that lastTransitionTime survives
// when nothing changed; no decision reads them.
type status struct {
	generation int64
	next       slicerv1alpha1.SlicerStatus
}

func newStatus(s *slicerv1alpha1.Slicer) *status {
	next := slicerv1alpha1.SlicerStatus{ObservedGeneration: s.Generation}
	next.Conditions = append(next.Conditions, s.Status.Conditions...)
	for i := range next.Conditions {
		next.Conditions[i] = *next.Conditions[i].DeepCopy()
	}
	return &status{generation: s.Generation, next: next}
}

func (st *status) set(t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.next.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: truncate(msg), ObservedGeneration: st.generation,
	})
}

func (st *status) isTrue(t string) bool {
	return meta.IsStatusConditionTrue(st.next.Conditions, t)
}

func (st *status) message(t string) string {
	if c := meta.FindStatusCondition(st.next.Conditions, t); c != nil {
		return c.Message
	}
	return ""
}

func (st *status) reason(t string) string {
	if c := meta.FindStatusCondition(st.next.Conditions, t); c != nil {
		return c.Reason
	}
	return ""
}

// summarizeConditions derives Available, Progressing and Degraded from the
// component conditions set in this reconcile and its error.
func (st *status) summarizeConditions(err error) {
	var missing, failed, rolling, unsupported []string
	for _, t := range append(append([]string{}, componentConditions...), slicerv1alpha1.ConditionMonitoringReady) {
		switch st.reason(t) {
		case slicerv1alpha1.ReasonUnsupportedKubernetesVersion:
			unsupported = append(unsupported, t)
		case slicerv1alpha1.ReasonDependencyMissing:
			missing = append(missing, t)
		case slicerv1alpha1.ReasonApplyFailed:
			failed = append(failed, t)
		case slicerv1alpha1.ReasonRollingOut, slicerv1alpha1.ReasonDriverLoading:
			rolling = append(rolling, t)
		}
	}
	notReady := []string{}
	for _, t := range componentConditions {
		if !st.isTrue(t) {
			notReady = append(notReady, t)
		}
	}
	if len(notReady) == 0 {
		st.set(slicerv1alpha1.ConditionAvailable, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, "every component is available")
	} else {
		st.set(slicerv1alpha1.ConditionAvailable, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, "not ready: "+strings.Join(notReady, ", "))
	}
	if len(rolling) > 0 {
		st.set(slicerv1alpha1.ConditionProgressing, metav1.ConditionTrue, slicerv1alpha1.ReasonRollingOut, "rolling out: "+strings.Join(rolling, ", "))
	} else {
		st.set(slicerv1alpha1.ConditionProgressing, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "nothing is rolling out")
	}
	switch {
	case len(failed) > 0 || err != nil:
		msg := "failed: " + strings.Join(failed, ", ")
		if err != nil {
			msg += "; " + err.Error()
		}
		st.set(slicerv1alpha1.ConditionDegraded, metav1.ConditionTrue, slicerv1alpha1.ReasonApplyFailed, msg)
	case len(unsupported) > 0:
		st.set(slicerv1alpha1.ConditionDegraded, metav1.ConditionTrue, slicerv1alpha1.ReasonUnsupportedKubernetesVersion, "the cluster's Kubernetes version is not supported; not provided: "+strings.Join(unsupported, ", "))
	case len(missing) > 0:
		st.set(slicerv1alpha1.ConditionDegraded, metav1.ConditionTrue, slicerv1alpha1.ReasonDependencyMissing, "missing dependencies for: "+strings.Join(missing, ", "))
	default:
		st.set(slicerv1alpha1.ConditionDegraded, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "no failures")
	}
}

func truncate(s string) string {
	const max = 1024
	if len(s) > max {
		return s[:max]
	}
	return s
}

// result collects errors and the soonest requeue of one reconcile.
type result struct {
	errs  []error
	after time.Duration
}

func (r *result) fail(err error) { r.errs = append(r.errs, err) }

func (r *result) requeueAfter(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if d > maxRequeue {
		d = maxRequeue
	}
	if r.after == 0 || d < r.after {
		r.after = d
	}
}

func (r *result) err() error { return errors.Join(r.errs...) }

// outcome returns an error (exponential backoff) if anything failed,
// otherwise the soonest requeue.
func (r *result) outcome() (ctrl.Result, error) {
	if err := r.err(); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.after}, nil
}
