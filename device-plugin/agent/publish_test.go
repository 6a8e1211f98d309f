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
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
)

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
		OrphanGrace: time.Hour, PublishInterval: interval, Metrics: engine.NewMetrics(prometheus.NewRegistry()),
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
					Profile: "1g.10gb", Placement: &slicerv1alpha1.Placement{Start: slot, Size: 1}},
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
