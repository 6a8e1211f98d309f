package controller

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// healthy is every required and optional condition True.
func healthy() []metav1.Condition {
	var conds []metav1.Condition
	for _, t := range append(append([]string{}, requiredConditions...), optionalConditions...) {
		conds = append(conds, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: slicerv1alpha1.ReasonAsExpected, Message: t + " fine"})
	}
	return conds
}

func with(conds []metav1.Condition, t string, s metav1.ConditionStatus, reason, msg string) []metav1.Condition {
	meta.SetStatusCondition(&conds, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg})
	return conds
}

func without(conds []metav1.Condition, t string) []metav1.Condition {
	meta.RemoveStatusCondition(&conds, t)
	return conds
}

func TestSummarize(t *testing.T) {
	const (
		tru = metav1.ConditionTrue
		fal = metav1.ConditionFalse
	)
	type want struct {
		status  metav1.ConditionStatus
		reason  string
		message []string // substrings
	}
	for _, tc := range []struct {
		name        string
		conds       []metav1.Condition
		err         error
		available   want
		progressing metav1.ConditionStatus
		degraded    want
	}{
		{
			name:        "all true",
			conds:       healthy(),
			available:   want{tru, slicerv1alpha1.ReasonAsExpected, []string{"pods can get MIG slices"}},
			progressing: fal,
			degraded:    want{fal, slicerv1alpha1.ReasonAsExpected, []string{"no failures"}},
		},
		{
			name:        "DRA frontend: says what it runs, not admission and scheduler",
			conds:       with(healthy(), slicerv1alpha1.ConditionDeviceClassesReady, tru, slicerv1alpha1.ReasonApplied, "7 DeviceClasses"),
			available:   want{tru, slicerv1alpha1.ReasonAsExpected, []string{"DeviceClasses applied and agent available", "stock kube-scheduler"}},
			progressing: fal,
			degraded:    want{fal, slicerv1alpha1.ReasonAsExpected, []string{"no failures"}},
		},
		{
			name:        "optional Prometheus operator missing: still Available, not Degraded",
			conds:       with(healthy(), slicerv1alpha1.ConditionMonitoringReady, fal, slicerv1alpha1.ReasonDependencyMissing, "install the Prometheus operator"),
			available:   want{tru, slicerv1alpha1.ReasonAsExpected, []string{"optional dependency missing for MonitoringReady"}},
			progressing: fal,
			degraded:    want{fal, slicerv1alpha1.ReasonAsExpected, []string{"optional dependency missing for: MonitoringReady"}},
		},
		{
			name:        "monitoring objects failing to apply degrade but do not block",
			conds:       with(healthy(), slicerv1alpha1.ConditionMonitoringReady, fal, slicerv1alpha1.ReasonApplyFailed, "boom"),
			available:   want{tru, slicerv1alpha1.ReasonAsExpected, nil},
			progressing: fal,
			degraded:    want{tru, slicerv1alpha1.ReasonApplyFailed, []string{"MonitoringReady"}},
		},
		{
			name:        "NFD opted out",
			conds:       with(healthy(), slicerv1alpha1.ConditionNodeFeatureRuleReady, tru, slicerv1alpha1.ReasonDisabled, "Disabled"),
			available:   want{tru, slicerv1alpha1.ReasonAsExpected, nil},
			progressing: fal,
			degraded:    want{fal, slicerv1alpha1.ReasonAsExpected, []string{"no failures"}},
		},
		{
			name:        "required NFD missing blocks with its reason and message",
			conds:       with(healthy(), slicerv1alpha1.ConditionNodeFeatureRuleReady, fal, slicerv1alpha1.ReasonDependencyMissing, "install NFD"),
			available:   want{fal, slicerv1alpha1.ReasonDependencyMissing, []string{"NodeFeatureRuleReady: install NFD"}},
			progressing: fal,
			degraded:    want{tru, slicerv1alpha1.ReasonDependencyMissing, []string{"required dependency missing for: NodeFeatureRuleReady"}},
		},
		{
			name: "KMM missing outranks the agent rolling out",
			conds: with(with(healthy(), slicerv1alpha1.ConditionAgentAvailable, fal, slicerv1alpha1.ReasonRollingOut, "agent 0 of 1"),
				slicerv1alpha1.ConditionDriverReady, fal, slicerv1alpha1.ReasonDependencyMissing, "install KMM"),
			available:   want{fal, slicerv1alpha1.ReasonDependencyMissing, []string{"DriverReady: install KMM", "AgentAvailable: agent 0 of 1"}},
			progressing: tru,
			degraded:    want{tru, slicerv1alpha1.ReasonDependencyMissing, []string{"DriverReady"}},
		},
		{
			name:        "rolling out",
			conds:       with(healthy(), slicerv1alpha1.ConditionSchedulerAvailable, fal, slicerv1alpha1.ReasonRollingOut, "1 of 2"),
			available:   want{fal, slicerv1alpha1.ReasonRollingOut, []string{"SchedulerAvailable: 1 of 2"}},
			progressing: tru,
			degraded:    want{fal, slicerv1alpha1.ReasonAsExpected, nil},
		},
		{
			name:        "driver loading is rolling out",
			conds:       with(healthy(), slicerv1alpha1.ConditionDriverReady, fal, slicerv1alpha1.ReasonDriverLoading, "1 of 3 nodes"),
			available:   want{fal, slicerv1alpha1.ReasonRollingOut, []string{"DriverReady: 1 of 3 nodes"}},
			progressing: tru,
			degraded:    want{fal, slicerv1alpha1.ReasonAsExpected, nil},
		},
		{
			name:        "a required condition not reported yet",
			conds:       without(healthy(), slicerv1alpha1.ConditionAgentAvailable),
			available:   want{fal, slicerv1alpha1.ReasonRollingOut, []string{"AgentAvailable: not reported yet"}},
			progressing: fal,
			degraded:    want{fal, slicerv1alpha1.ReasonAsExpected, nil},
		},
		{
			name: "unsupported Kubernetes outranks everything",
			conds: with(with(healthy(), slicerv1alpha1.ConditionWebhookAvailable, fal, slicerv1alpha1.ReasonApplyFailed, "boom"),
				slicerv1alpha1.ConditionKubernetesVersionSupported, fal, slicerv1alpha1.ReasonUnsupportedKubernetesVersion, "1.34"),
			available:   want{fal, slicerv1alpha1.ReasonUnsupportedKubernetesVersion, []string{"KubernetesVersionSupported: 1.34", "WebhookAvailable: boom"}},
			progressing: fal,
			degraded:    want{tru, slicerv1alpha1.ReasonApplyFailed, []string{"WebhookAvailable"}},
		},
		{
			name:        "a reconcile error degrades",
			conds:       healthy(),
			err:         errors.New("apiserver gone"),
			available:   want{tru, slicerv1alpha1.ReasonAsExpected, nil},
			progressing: fal,
			degraded:    want{tru, slicerv1alpha1.ReasonApplyFailed, []string{"apiserver gone"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := summarize(tc.conds, tc.err)
			check := func(typ string, w want) {
				t.Helper()
				c := meta.FindStatusCondition(got, typ)
				if c == nil {
					t.Fatalf("%s not set", typ)
				}
				if c.Status != w.status || c.Reason != w.reason {
					t.Errorf("%s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, w.status, w.reason)
				}
				for _, m := range w.message {
					if !strings.Contains(c.Message, m) {
						t.Errorf("%s message %q lacks %q", typ, c.Message, m)
					}
				}
			}
			check(slicerv1alpha1.ConditionAvailable, tc.available)
			check(slicerv1alpha1.ConditionDegraded, tc.degraded)
			if p := meta.FindStatusCondition(got, slicerv1alpha1.ConditionProgressing); p == nil || p.Status != tc.progressing {
				t.Errorf("Progressing = %v, want %s", p, tc.progressing)
			}
		})
	}
}
