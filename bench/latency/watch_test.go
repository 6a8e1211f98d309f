package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/builder"
)

// TestWatchKeepsFirstSight: each state is stamped when first seen and kept through later
// updates, a pod created again under its name starts afresh, and the plan record and the
// Unschedulable condition are read from the pod's conditions.
func TestWatchKeepsFirstSight(t *testing.T) {
	w := &podWatch{pods: map[string]*seen{}}
	w.creating("big")
	p := builder.Pod("ns", "big").Obj()
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	w.onPod(p, false)
	s := w.get("big")
	if s.unschedulable.IsZero() || !s.planned.IsZero() || isBound(s) {
		t.Fatalf("after Unschedulable: %+v", s)
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: slicerv1alpha1.PodConditionDefragmentationPlan, Status: corev1.ConditionTrue})
	w.onPod(p, false)
	planned := w.get("big").planned
	if planned.IsZero() {
		t.Fatal("the plan record was not seen")
	}
	time.Sleep(time.Millisecond)
	p.Spec.NodeName = "n"
	p.Status.Phase = corev1.PodRunning
	w.onPod(p, false)
	s = w.get("big")
	if !s.planned.Equal(planned) || !isBound(s) || !isRunning(s) || !s.running.After(planned) {
		t.Fatalf("after Running: %+v (planned first at %v)", s, planned)
	}
	p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	w.onPod(p, false)
	w.onPod(p, true)
	if s = w.get("big"); s.deleting.IsZero() || !isGone(s) {
		t.Fatalf("after delete: %+v", s)
	}
	w.creating("big")
	if s = w.get("big"); isGone(s) || isRunning(s) || s.created.IsZero() {
		t.Fatalf("created again: %+v", s)
	}
}

func TestQuantiles(t *testing.T) {
	rs := []round{{latency: 3 * time.Second}, {latency: time.Second}, {latency: 4 * time.Second}, {latency: 2 * time.Second}}
	if p50, mx := quantiles(rs); p50 != 2*time.Second || mx != 4*time.Second {
		t.Fatalf("p50 %v max %v, want 2s 4s", p50, mx)
	}
}
