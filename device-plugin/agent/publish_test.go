package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
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

// churn drives reconciles of one agent while allocations come and go, a simulated 50 ms
// apart, and returns the NodeAccelerator status writes and the simulated time.
func churn(t *testing.T, interval time.Duration, rounds int) (writes int64, elapsed time.Duration) {
	t.Helper()
	const node = "n1"
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := slicerv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var naWrites atomic.Int64
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&slicerv1alpha1.SliceAllocation{}, &slicerv1alpha1.NodeAccelerator{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*slicerv1alpha1.NodeAccelerator); ok {
					naWrites.Add(1)
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	backend, err := emulated.New(emulated.Options{Node: node, GPUs: []mig.Model{mig.H100_80GB}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	r := New(c, nil, Options{NodeName: node, Library: backend, Emulated: true, CDI: &cdi.Writer{Dir: t.TempDir()},
		OrphanGrace: time.Hour, PublishInterval: interval, Metrics: NewMetrics(prometheus.NewRegistry()),
		Now: func() time.Time { return now }})
	ctx := context.Background()
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: node}}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	reconcile()
	start := now
	gpu := emulated.GPUUUID(node, 0)
	rnd := rand.New(rand.NewPCG(1, 2))
	for range rounds {
		now = now.Add(50 * time.Millisecond)
		// Seven 1g.10gb slots: create a random slot's allocation, or delete it when it exists.
		slot := int32(rnd.IntN(7))
		name := fmt.Sprintf("a%d", slot)
		var a slicerv1alpha1.SliceAllocation
		err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: name}, &a)
		if err == nil {
			if err := c.Delete(ctx, &a); err != nil {
				t.Fatal(err)
			}
		} else {
			a = slicerv1alpha1.SliceAllocation{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{slicerv1alpha1.LabelNode: node},
					Finalizers: []string{slicerv1alpha1.AllocationFinalizer}},
				Spec: slicerv1alpha1.SliceAllocationSpec{PodName: "p-" + name, PodUID: "uid-" + name, NodeName: node, GPUUUID: gpu,
					Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: slot, Size: 1}},
			}
			if err := c.Create(ctx, &a); err != nil {
				t.Fatal(err)
			}
		}
		reconcile()
	}
	// Quiet: the pending write goes out at its deadline.
	now = now.Add(2 * interval)
	reconcile()
	var na slicerv1alpha1.NodeAccelerator
	if err := c.Get(ctx, types.NamespacedName{Name: node}, &na); err != nil {
		t.Fatal(err)
	}
	want := map[int32]bool{}
	for i := range 7 {
		var a slicerv1alpha1.SliceAllocation
		if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("a%d", i)}, &a); err == nil {
			want[a.Spec.Placement.Start] = true
		}
	}
	got := map[int32]bool{}
	for _, s := range na.Status.GPUs[0].Slices {
		got[s.Placement.Start] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the churn the NodeAccelerator shows slices at %v, want %v", got, want)
	}
	return naWrites.Load(), now.Sub(start)
}

// Under churn the agent writes its NodeAccelerator status at most once per interval (plus
// the first write), and the last state still reaches the API.
func TestNodeAcceleratorWritesCoalescedUnderChurn(t *testing.T) {
	const rounds = 200 // 10 s of simulated churn, one allocation created or deleted per reconcile
	writes, elapsed := churn(t, time.Second, rounds)
	limit := int64(elapsed/time.Second) + 1
	t.Logf("coalesced: %d NodeAccelerator status writes in %d reconciles over %s", writes, rounds, elapsed)
	if writes > limit {
		t.Errorf("%d NodeAccelerator status writes in %s of churn, want at most %d", writes, elapsed, limit)
	}
	// The same churn without coalescing writes on almost every reconcile: the count above
	// measures the coalescing.
	uncoalesced, _ := churn(t, -1, rounds)
	t.Logf("uncoalesced: %d writes", uncoalesced)
	if uncoalesced < rounds/2 {
		t.Errorf("without coalescing: %d writes in %d reconciles, want most of them", uncoalesced, rounds)
	}
}

// A cached copy at the resourceVersion the agent's own write replaced is stale: nothing is
// written from it until the cache catches up.
func TestOwnWritesStaleUntilTheCacheCatchesUp(t *testing.T) {
	var o ownWrites
	at := func(rv string) *slicerv1alpha1.SliceAllocation {
		return &slicerv1alpha1.SliceAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: rv}}
	}
	k := types.NamespacedName{Namespace: "ns", Name: "a"}
	if o.stale(at("5")) {
		t.Error("stale before any write")
	}
	o.wrote(k, "5")
	if !o.stale(at("5")) {
		t.Error("the copy from before the write is not stale")
	}
	if o.stale(at("6")) {
		t.Error("the copy from after the write is stale")
	}
	o.prune(map[types.NamespacedName]*slicerv1alpha1.SliceAllocation{k: at("5")})
	if !o.stale(at("5")) {
		t.Error("pruned while the cache still lags")
	}
	o.prune(map[types.NamespacedName]*slicerv1alpha1.SliceAllocation{k: at("6")})
	if o.stale(at("5")) || len(o.replaced) != 0 {
		t.Error("not pruned once the cache caught up")
	}
	o.wrote(k, "6")
	o.prune(nil)
	if len(o.replaced) != 0 {
		t.Error("not pruned once the allocation is gone")
	}
}
