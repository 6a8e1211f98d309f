package agent

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
)

// A reconcile on a cache that has not yet seen the deletion an earlier one made decides to
// collect the allocation again: the second delete must neither count, log nor record an Event
// for the release again (the agent's integration suite once counted 4 releases for 3 allocations so). The
// fake client stands for the lagging cache: the test hands collect the stale copy.
func TestCollectCountsOneReleaseFromAStaleCache(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := slicerv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	a := &slicerv1alpha1.SliceAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a",
		Finalizers: []string{slicerv1alpha1.AllocationFinalizer}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(a).Build()
	m := engine.NewMetrics(prometheus.NewRegistry())
	rec := events.NewFakeRecorder(10)
	r := New(c, rec, Options{NodeName: "n1", Metrics: m})
	ctx := context.Background()
	k := types.NamespacedName{Namespace: "ns", Name: "a"}
	var stale slicerv1alpha1.SliceAllocation
	if err := c.Get(ctx, k, &stale); err != nil {
		t.Fatal(err)
	}
	ends := map[types.NamespacedName]podEnd{k: {Why: "no pod ns/p"}}
	for i := 0; i < 2; i++ {
		copyOf := stale.DeepCopy()
		if err := r.collect(ctx, map[types.NamespacedName]*slicerv1alpha1.SliceAllocation{k: copyOf}, []types.NamespacedName{k}, ends); err != nil {
			t.Fatalf("collect %d: %v", i+1, err)
		}
	}
	var now slicerv1alpha1.SliceAllocation
	if err := c.Get(ctx, client.ObjectKeyFromObject(a), &now); err != nil || now.DeletionTimestamp == nil {
		t.Fatalf("allocation after collect: %+v, %v; want it being deleted (the finalizer holds it)", now.ObjectMeta, err)
	}
	if got := testutil.ToFloat64(m.PodGone); got != 1 {
		t.Errorf("PodGone = %v after collecting one allocation twice from a stale cache, want 1", got)
	}
	var recorded []string
	for len(rec.Events) > 0 {
		recorded = append(recorded, <-rec.Events)
	}
	if want := "Normal PodGone releasing the allocation: no pod ns/p"; len(recorded) != 1 || recorded[0] != want {
		t.Errorf("Events = %q, want exactly [%q]", recorded, want)
	}
}
