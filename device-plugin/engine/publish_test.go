package engine

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func TestClassify(t *testing.T) {
	gpu := func(slices ...slicerv1alpha1.MIGSlice) slicerv1alpha1.GPUStatus {
		return slicerv1alpha1.GPUStatus{UUID: "GPU-0", Health: slicerv1alpha1.GPUHealthy, Slices: slices}
	}
	sl := func(start int32, state slicerv1alpha1.SliceState) slicerv1alpha1.MIGSlice {
		return slicerv1alpha1.MIGSlice{Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: start, Size: 1}, GPUInstanceID: start + 1, State: state}
	}
	st := func(gpus ...slicerv1alpha1.GPUStatus) slicerv1alpha1.NodeAcceleratorStatus {
		return slicerv1alpha1.NodeAcceleratorStatus{Driver: slicerv1alpha1.DriverStateReady, GPUs: gpus}
	}
	base := st(gpu(sl(0, slicerv1alpha1.SliceAllocated)))
	unhealthy := st(gpu(sl(0, slicerv1alpha1.SliceAllocated)))
	unhealthy.GPUs[0].Health = slicerv1alpha1.GPUUnhealthy
	driverDown := st(gpu(sl(0, slicerv1alpha1.SliceAllocated)))
	driverDown.Driver = slicerv1alpha1.DriverStateNotReady
	withCond := st(gpu(sl(0, slicerv1alpha1.SliceAllocated)))
	withCond.Conditions = []metav1.Condition{{Type: slicerv1alpha1.ConditionReady, Status: metav1.ConditionFalse}}
	tests := []struct {
		name string
		new  slicerv1alpha1.NodeAcceleratorStatus
		want statusChange
	}{
		{"unchanged", st(gpu(sl(0, slicerv1alpha1.SliceAllocated))), changeNone},
		{"a slice added", st(gpu(sl(0, slicerv1alpha1.SliceAllocated), sl(1, slicerv1alpha1.SliceAllocated))), changeSlices},
		{"a slice changes state", st(gpu(sl(0, slicerv1alpha1.SlicePendingDelete))), changeSlices},
		{"a slice gone", st(gpu()), changeFreesRoom},
		{"a slice replaced by another", st(gpu(sl(1, slicerv1alpha1.SliceAllocated))), changeFreesRoom},
		{"a GPU turns unhealthy", unhealthy, changeUrgent},
		{"the driver goes", driverDown, changeUrgent},
		{"a condition changes", withCond, changeUrgent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(base, tc.new); got != tc.want {
				t.Errorf("classify = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPublishClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		ms   int
		k    statusChange
		wait time.Duration // 0: written now
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"urgent changes go at once, one after another", []step{{0, changeUrgent, 0}, {10, changeUrgent, 0}}},
		{"added slices wait a full interval, even after a long quiet time", []step{{0, changeUrgent, 0}, {5000, changeSlices, time.Second},
			{5400, changeSlices, 600 * time.Millisecond}, {6000, changeSlices, 0}}},
		{"a lost slice goes at once after a quiet interval, else at the interval's end", []step{{0, changeUrgent, 0},
			{300, changeFreesRoom, 700 * time.Millisecond}, {1000, changeFreesRoom, 0}, {1500, changeFreesRoom, 500 * time.Millisecond}}},
		{"a lost slice brings a pending write of added slices forward", []step{{0, changeUrgent, 0}, {800, changeSlices, time.Second},
			{900, changeFreesRoom, 100 * time.Millisecond}, {1000, changeSlices, 0}}},
		{"a status back to the API's keeps the deadline of the interval", []step{{0, changeUrgent, 0}, {2000, changeSlices, time.Second},
			{2100, changeNone, 0}, {2500, changeSlices, 500 * time.Millisecond}, {3000, changeSlices, 0}}},
		{"a deadline passed with nothing to write is dropped", []step{{0, changeUrgent, 0}, {2000, changeSlices, time.Second},
			{3100, changeNone, 0}, {4000, changeSlices, time.Second}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c publishClock
			for _, s := range tc.steps {
				w := c.wait(s.k, at(s.ms), time.Second)
				if w != s.wait {
					t.Fatalf("at %dms (%d): wait %s, want %s", s.ms, s.k, w, s.wait)
				}
				if w == 0 && s.k != changeNone {
					c.wrote(at(s.ms))
				}
			}
		})
	}
}
