package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// A pod deleted while PreBind waits for its slices: PreBind fails and
// Unreserve drops the reservation and deletes the allocation, all before the
// snapshot's informer has shown that allocation (here it never runs). The
// allocation exists in the API until the agent releases it, so its slot must
// stay taken: before, it looked free and a pending pod took it, a double
// allocation once the informer caught up.
func TestPodDeletedDuringPreBindKeepsItsSlotUntilTheSnapshotShowsIt(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, accel("n1", 1))
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(slicerv1alpha1.AddToScheme(scheme))
	p.client = fake.NewClientBuilder().WithScheme(scheme).Build()
	p.pods = corelisters.NewPodLister(toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})) // the pod is gone
	p.timeout = time.Minute

	gone := migPod("gone", "slicer.dev/mig-7g.80gb", "1")
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, gone, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if st := p.Reserve(ctx, cs, gone, "n1"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	st := p.PreBind(ctx, cs, gone, "n1")
	if st.IsSuccess() || !strings.Contains(st.Message(), "was deleted while its slices were being created") {
		t.Fatalf("PreBind: %v, want the pod deleted", st)
	}
	p.Unreserve(ctx, cs, gone, "n1")

	waiting := migPod("waiting", "slicer.dev/mig-7g.80gb", "1")
	cs2 := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs2, waiting, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if st := p.Filter(ctx, cs2, waiting, nodeInfo("n1", nil)); st.Code() != fwk.Unschedulable {
		t.Errorf("Filter of another pod: %v, want Unschedulable: the deleted pod's allocation still holds the GPU", st)
	}
	if st := p.Reserve(ctx, cs2, waiting, "n1"); st.IsSuccess() {
		t.Fatal("another pod reserved the slot of an allocation the snapshot has not shown yet")
	}

	// The informer catches up: the allocation, being deleted (the agent's
	// finalizer), holds the slot until it is gone.
	var list slicerv1alpha1.SliceAllocationList
	if err := p.client.List(ctx, &list); err != nil || len(list.Items) != 1 || list.Items[0].DeletionTimestamp == nil {
		t.Fatalf("allocations %+v (%v), want one being deleted", list.Items, err)
	}
	a := &list.Items[0]
	p.cache.SetAllocation(snapshot.AllocationFromObject(a))
	if st := p.Filter(ctx, cs2, waiting, nodeInfo("n1", nil)); st.Code() != fwk.Unschedulable {
		t.Errorf("Filter with the allocation shown, being deleted: %v, want Unschedulable", st)
	}
	p.cache.DeleteAllocation(a.Namespace, a.Name)
	if st := p.Filter(ctx, cs2, waiting, nodeInfo("n1", nil)); !st.IsSuccess() {
		t.Errorf("Filter once the allocation is gone: %v", st)
	}
}
