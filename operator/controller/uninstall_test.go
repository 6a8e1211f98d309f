package controller

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func holder(ns, name string, exists, deleting bool) sliceHolder {
	return sliceHolder{Pod: types.NamespacedName{Namespace: ns, Name: name}, UID: types.UID("uid-" + name), Slices: 1, Exists: exists, Deleting: deleting}
}

func TestDecideRelease(t *testing.T) {
	a, b, gone, terminating := holder("team-a", "train", true, false), holder("team-b", "serve", true, false),
		holder("team-a", "old", false, false), holder("team-b", "ending", true, true)
	wait, force := slicerv1alpha1.UninstallWait, slicerv1alpha1.UninstallForce
	for _, tc := range []struct {
		name  string
		facts releaseFacts
		want  releaseDecision
		// msg must appear in the condition message.
		msg []string
	}{
		{name: "nothing holds a slice: done, under either policy",
			facts: releaseFacts{Policy: wait},
			want:  releaseDecision{Done: true, Reason: slicerv1alpha1.ReasonAsExpected}},
		{name: "forced, nothing holds a slice: done, the scheduler is not touched",
			facts: releaseFacts{Policy: force},
			want:  releaseDecision{Done: true, Reason: slicerv1alpha1.ReasonAsExpected}},
		{name: "wait (the default, empty) with pods: nothing is removed, the pods are named",
			facts: releaseFacts{Holders: []sliceHolder{a, b}},
			want:  releaseDecision{Reason: slicerv1alpha1.ReasonWaitingForPods},
			msg:   []string{"2 pods hold MIG slices: team-a/train, team-b/serve", "spec.uninstall.policy to Force"}},
		{name: "wait with allocations being released only",
			facts: releaseFacts{Policy: wait, Releasing: 3},
			want:  releaseDecision{Reason: slicerv1alpha1.ReasonWaitingForPods},
			msg:   []string{"release 3 allocations"}},
		{name: "wait never deletes, even when the scheduler is gone",
			facts: releaseFacts{Policy: wait, Holders: []sliceHolder{a}, AllocatorsGone: true},
			want:  releaseDecision{Reason: slicerv1alpha1.ReasonWaitingForPods},
			msg:   []string{"1 pods hold MIG slices: team-a/train"}},
		{name: "force: the scheduler goes first, no pod yet",
			facts: releaseFacts{Policy: force, Holders: []sliceHolder{a, b}},
			want:  releaseDecision{Reason: slicerv1alpha1.ReasonReleasingSlices, StopAllocators: true},
			msg:   []string{"stopping the scheduler and removing the DeviceClasses", "team-a/train, team-b/serve"}},
		{name: "force, scheduler gone: the running pods are deleted, not those gone or terminating",
			facts: releaseFacts{Policy: force, AllocatorsGone: true, Holders: []sliceHolder{gone, a, terminating}, Releasing: 1},
			want:  releaseDecision{Reason: slicerv1alpha1.ReasonReleasingSlices, DeletePods: []sliceHolder{a}},
			msg:   []string{"deleting the 3 pods", "team-a/old, team-a/train, team-b/ending", "1 allocations being released"}},
		{name: "claims being released keep the step waiting, under either policy",
			facts: releaseFacts{Policy: wait, ReleasingClaims: 2},
			want:  releaseDecision{Reason: slicerv1alpha1.ReasonWaitingForPods},
			msg:   []string{"2 ResourceClaims of mig.slicer.dev being released"}},
		{name: "force, pods gone: wait for the agents",
			facts: releaseFacts{Policy: force, AllocatorsGone: true, Releasing: 2},
			want:  releaseDecision{Reason: slicerv1alpha1.ReasonReleasingSlices},
			msg:   []string{"destroy the MIG instances of 2 allocations"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideRelease(tc.facts)
			msg := got.Message
			got.Message = ""
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decision = %+v, want %+v", got, tc.want)
			}
			for _, m := range tc.msg {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q lacks %q", msg, m)
				}
			}
		})
	}
}

// The condition names at most maxNamedPods pods and counts the rest.
func TestNamePodsCaps(t *testing.T) {
	var hs []sliceHolder
	for i := range 13 {
		hs = append(hs, holder("ns", fmt.Sprintf("p%02d", i), true, false))
	}
	got := namePods(hs)
	if !strings.HasPrefix(got, "ns/p00, ns/p01") || !strings.HasSuffix(got, "ns/p09 and 3 more") || strings.Contains(got, "p10") {
		t.Errorf("namePods = %q", got)
	}
	if got := namePods(hs[:2]); got != "ns/p00, ns/p01" {
		t.Errorf("namePods(2) = %q", got)
	}
}

func TestHoldersOf(t *testing.T) {
	alloc := func(ns, name, pod, uid string, deleting bool) slicerv1alpha1.SliceAllocation {
		a := slicerv1alpha1.SliceAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: slicerv1alpha1.SliceAllocationSpec{PodName: pod, PodUID: uid}}
		if deleting {
			a.DeletionTimestamp = &metav1.Time{}
		}
		return a
	}
	hs, releasing := holdersOf([]slicerv1alpha1.SliceAllocation{
		alloc("b", "x-0", "x", "u1", false),
		alloc("a", "y-0", "y", "u2", false),
		alloc("b", "x-1", "x", "u1", false),
		alloc("a", "z-0", "z", "u3", true),
	})
	want := []sliceHolder{
		{Pod: types.NamespacedName{Namespace: "a", Name: "y"}, UID: "u2", Slices: 1},
		{Pod: types.NamespacedName{Namespace: "b", Name: "x"}, UID: "u1", Slices: 2},
	}
	if !reflect.DeepEqual(hs, want) || releasing != 1 {
		t.Errorf("holdersOf = %+v, %d; want %+v, 1", hs, releasing, want)
	}
}

// The DRA frontend's holders are the pods its driver's allocated claims are reserved for;
// claims of other drivers, unallocated or reserved for no pod hold nothing; a claim being
// deleted is released by the kubelet.
func TestClaimHolders(t *testing.T) {
	const ours, theirs = "mig.slicer.dev", "gpu.example.com"
	claim := func(ns, name string, drivers []string, deleting bool, pods ...string) resourceapi.ResourceClaim {
		c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if drivers != nil {
			c.Status.Allocation = &resourceapi.AllocationResult{}
			for _, d := range drivers {
				c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{Driver: d})
			}
		}
		if deleting {
			c.DeletionTimestamp = &metav1.Time{}
		}
		for _, p := range pods {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("uid-" + p)})
		}
		return c
	}
	hs, releasing := claimHolders([]resourceapi.ResourceClaim{
		claim("b", "train-gpu", []string{ours, ours, theirs}, false, "train"),
		claim("a", "shared", []string{ours}, false, "w1", "w2"),
		claim("a", "other", []string{theirs}, false, "w3"),
		claim("a", "pending", nil, false),
		claim("a", "idle", []string{ours}, false),
		claim("a", "ending", []string{ours}, true, "old"),
		claim("b", "train-more", []string{ours}, false, "train"),
	}, ours)
	want := []sliceHolder{
		{Pod: types.NamespacedName{Namespace: "a", Name: "w1"}, UID: "uid-w1", Slices: 1},
		{Pod: types.NamespacedName{Namespace: "a", Name: "w2"}, UID: "uid-w2", Slices: 1},
		{Pod: types.NamespacedName{Namespace: "b", Name: "train"}, UID: "uid-train", Slices: 3},
	}
	if !reflect.DeepEqual(hs, want) || releasing != 1 {
		t.Errorf("claimHolders = %+v, %d; want %+v, 1", hs, releasing, want)
	}
	merged := mergeHolders(hs, []sliceHolder{{Pod: types.NamespacedName{Namespace: "b", Name: "train"}, UID: "uid-train", Slices: 1}})
	if len(merged) != 3 || merged[2].Slices != 4 {
		t.Errorf("mergeHolders: a pod named by both frontends is one holder with both counts: %+v", merged)
	}
}

// The condition appears only on a deletion that waited; once released it turns True.
func TestSetReleased(t *testing.T) {
	s := &slicerv1alpha1.Slicer{}
	setReleased(s, releaseDecision{Done: true, Reason: slicerv1alpha1.ReasonAsExpected})
	if len(s.Status.Conditions) != 0 {
		t.Fatalf("a deletion that never waited got %v", s.Status.Conditions)
	}
	setReleased(s, releaseDecision{Reason: slicerv1alpha1.ReasonWaitingForPods, Message: "1 pods hold MIG slices: a/b"})
	if c := s.Status.Conditions; len(c) != 1 || c[0].Status != metav1.ConditionFalse || c[0].Message != "1 pods hold MIG slices: a/b" {
		t.Fatalf("waiting: %v", c)
	}
	setReleased(s, releaseDecision{Done: true, Reason: slicerv1alpha1.ReasonAsExpected, Message: "done"})
	if c := s.Status.Conditions; len(c) != 1 || c[0].Status != metav1.ConditionTrue {
		t.Fatalf("released: %v", c)
	}
}
