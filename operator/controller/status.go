package controller

import (
	"errors"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// requiredConditions must all be True for the installation to be
// Available, that is for pods to get MIG slices: a supported Kubernetes
// minor, the node labelling the spec asks for (NFD unless opted out), the
// driver where the Slicer loads one, admission (webhook and policy), the
// scheduler and the agent.
var requiredConditions = []string{
	slicerv1alpha1.ConditionKubernetesVersionSupported,
	slicerv1alpha1.ConditionNodeFeatureRuleReady,
	slicerv1alpha1.ConditionDriverReady,
	slicerv1alpha1.ConditionWebhookAvailable,
	slicerv1alpha1.ConditionSchedulerAvailable,
	slicerv1alpha1.ConditionAgentAvailable,
}

// optionalConditions report what pods do not need to get slices: a False
// one (e.g. the Prometheus operator missing) leaves Available True and,
// unless something failed, Degraded False.
var optionalConditions = []string{
	slicerv1alpha1.ConditionMonitoringReady,
	// Nodes not under way keep serving while the driver is upgraded (KMM mode).
	slicerv1alpha1.ConditionDriverUpgraded,
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

// remove drops a condition that no longer applies (e.g. one of another frontend).
func (st *status) remove(t string) {
	meta.RemoveStatusCondition(&st.next.Conditions, t)
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

// summarizeConditions derives Available, Progressing and Degraded from the
// component conditions set in this reconcile and its error.
func (st *status) summarizeConditions(err error) {
	for _, c := range summarize(st.next.Conditions, err) {
		st.set(c.Type, c.Status, c.Reason, c.Message)
	}
}

// summarize computes the summary conditions (Type, Status, Reason and
// Message only) from the component conditions and the reconcile's error.
//
//   - Available is True when every required condition is True. Otherwise
//     its reason is that of the most telling blocker
//     (UnsupportedKubernetesVersion, then DependencyMissing, ApplyFailed,
//     RollingOut) and its message names each blocker with its message.
//   - Progressing is True while a component rolls out.
//   - Degraded is True when something failed, the Kubernetes minor is not
//     supported, or a required dependency is missing; a missing optional
//     one is only named in its message.
func summarize(conds []metav1.Condition, err error) []metav1.Condition {
	reasonOf := func(t string) string {
		if c := meta.FindStatusCondition(conds, t); c != nil {
			return c.Reason
		}
		return ""
	}
	var blockers []string
	blockerReason := ""
	rank := map[string]int{slicerv1alpha1.ReasonUnsupportedKubernetesVersion: 3, slicerv1alpha1.ReasonPartitionableDevicesOff: 2, slicerv1alpha1.ReasonDependencyMissing: 2, slicerv1alpha1.ReasonApplyFailed: 1}
	required := requiredConditions
	if meta.FindStatusCondition(conds, slicerv1alpha1.ConditionDeviceClassesReady) != nil {
		// Set in DRA mode only (and then required).
		required = append(append([]string{}, requiredConditions...), slicerv1alpha1.ConditionDeviceClassesReady)
	}
	for _, t := range required {
		c := meta.FindStatusCondition(conds, t)
		if c != nil && c.Status == metav1.ConditionTrue {
			continue
		}
		msg := "not reported yet"
		if c != nil {
			msg = c.Message
		}
		blockers = append(blockers, t+": "+msg)
		if r := reasonOf(t); blockerReason == "" || rank[r] > rank[blockerReason] {
			blockerReason = r
		}
	}
	if rank[blockerReason] == 0 {
		blockerReason = slicerv1alpha1.ReasonRollingOut
	}

	var missing, optionalMissing, failed, rolling, unsupported []string
	for _, t := range append(append([]string{}, required...), optionalConditions...) {
		switch reasonOf(t) {
		case slicerv1alpha1.ReasonUnsupportedKubernetesVersion:
			unsupported = append(unsupported, t)
		case slicerv1alpha1.ReasonDependencyMissing, slicerv1alpha1.ReasonPartitionableDevicesOff:
			if slices.Contains(optionalConditions, t) {
				optionalMissing = append(optionalMissing, t)
			} else {
				missing = append(missing, t)
			}
		case slicerv1alpha1.ReasonApplyFailed:
			failed = append(failed, t)
		case slicerv1alpha1.ReasonRollingOut, slicerv1alpha1.ReasonDriverLoading, slicerv1alpha1.ReasonDriverUpgrading, slicerv1alpha1.ReasonDriverUpgradeStalled:
			rolling = append(rolling, t)
		}
	}

	cond := func(t string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg}
	}
	var out []metav1.Condition
	if len(blockers) == 0 {
		msg := "pods can get MIG slices: admission, scheduler and agent are available"
		if len(required) > len(requiredConditions) {
			msg = "pods can get MIG slices: DeviceClasses applied and agent available (DRA frontend: the stock kube-scheduler places them)"
		}
		if len(optionalMissing) > 0 {
			msg += "; optional dependency missing for " + strings.Join(optionalMissing, ", ") + " (see its condition)"
		}
		out = append(out, cond(slicerv1alpha1.ConditionAvailable, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, msg))
	} else {
		out = append(out, cond(slicerv1alpha1.ConditionAvailable, metav1.ConditionFalse, blockerReason, "pods cannot get MIG slices yet; "+strings.Join(blockers, "; ")))
	}
	if len(rolling) > 0 {
		out = append(out, cond(slicerv1alpha1.ConditionProgressing, metav1.ConditionTrue, slicerv1alpha1.ReasonRollingOut, "rolling out: "+strings.Join(rolling, ", ")))
	} else {
		out = append(out, cond(slicerv1alpha1.ConditionProgressing, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "nothing is rolling out"))
	}
	switch {
	case len(failed) > 0 || err != nil:
		msg := "failed: " + strings.Join(failed, ", ")
		if err != nil {
			msg += "; " + err.Error()
		}
		out = append(out, cond(slicerv1alpha1.ConditionDegraded, metav1.ConditionTrue, slicerv1alpha1.ReasonApplyFailed, msg))
	case len(unsupported) > 0:
		out = append(out, cond(slicerv1alpha1.ConditionDegraded, metav1.ConditionTrue, slicerv1alpha1.ReasonUnsupportedKubernetesVersion, "the cluster's Kubernetes version is not supported; not provided: "+strings.Join(unsupported, ", ")))
	case len(missing) > 0:
		out = append(out, cond(slicerv1alpha1.ConditionDegraded, metav1.ConditionTrue, slicerv1alpha1.ReasonDependencyMissing, "required dependency missing for: "+strings.Join(missing, ", ")))
	case len(optionalMissing) > 0:
		out = append(out, cond(slicerv1alpha1.ConditionDegraded, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "no failures; optional dependency missing for: "+strings.Join(optionalMissing, ", ")))
	default:
		out = append(out, cond(slicerv1alpha1.ConditionDegraded, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "no failures"))
	}
	return out
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
