package slicemap

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func planEvent(ns, pod, uid, msg string, at time.Time, series bool) corev1.Event {
	e := corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: pod + "." + msg[:4]},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, UID: types.UID(uid)},
		Reason:         slicerv1alpha1.EventDefragmentationPlanned,
		Message:        msg,
		EventTime:      metav1.NewMicroTime(at),
	}
	if series {
		e.EventTime = metav1.NewMicroTime(at.Add(-time.Hour))
		e.Series = &corev1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(at)}
	}
	return e
}

// TestDefragmentationPlans: a pending pod shows the latest plan the scheduler recorded for it
// (by series or event time), never one recorded for an earlier pod of the same name.
func TestDefragmentationPlans(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	in := explainInput()
	in.Events = []corev1.Event{
		planEvent("ns", "overflow", "ou", "old plan", t0, false),
		planEvent("ns", "overflow", "ou", "new plan", t0.Add(time.Minute), true),
		planEvent("ns", "overflow", "u-earlier-pod", "stale plan", t0.Add(time.Hour), false),
		planEvent("ns", "next-pod", "u-next-other", "not this pod's", t0, false),
	}
	m := Build(in, Options{})
	got := map[string]string{}
	for _, p := range m.PendingPods {
		got[p.Name] = p.Defragmentation
	}
	if want := "new plan (2026-11-27T10:01:00Z)"; got["overflow"] != want {
		t.Fatalf("overflow: %q, want %q", got["overflow"], want)
	}
	if got["next-pod"] != "" {
		t.Fatalf("next-pod: %q, want none", got["next-pod"])
	}
	var text bytes.Buffer
	if err := WriteText(&text, m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "  ns/overflow  3g.40gb: 1 of 7 GPUs can take one now (the pod waits for something else: see its reason)\n    defragmentation plan: new plan (2026-11-27T10:01:00Z)\n") {
		t.Fatalf("WHY PENDING lacks the plan:\n%s", text.String())
	}
}
