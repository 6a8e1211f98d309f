package snapshot

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// FeedOptions are optional settings of Feed.
type FeedOptions struct {
	// BeforeEvent, when set, runs on an informer's goroutine before the cache
	// applies an event; deleted is true for a delete. Tests block it to make
	// the cache lag the scheduler's own informers.
	BeforeEvent func(obj client.Object, deleted bool)
}

// Feed wires informers on NodeAccelerators, SliceAllocations and the metadata of the nodes
// under a driver upgrade (fence.go) into the cache, starts them with ctx and returns once
// they have synced, so the cache is rebuilt from the API before the scheduler schedules
// anything.
func Feed(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, c *Cache, opts FeedOptions) (crcache.Cache, error) {
	before := opts.BeforeEvent
	if before == nil {
		before = func(client.Object, bool) {}
	}
	// Nothing reads managedFields; dropping them keeps the stored NodeAccelerators (whose
	// status the agent writes field by field) and SliceAllocations small.
	informers, err := crcache.New(cfg, crcache.Options{Scheme: scheme, DefaultTransform: crcache.TransformStripManagedFields(), ByObject: fenceCacheOptions()})
	if err != nil {
		return nil, fmt.Errorf("informer cache: %w", err)
	}
	naInf, err := informers.GetInformer(ctx, &slicerv1alpha1.NodeAccelerator{})
	if err != nil {
		return nil, fmt.Errorf("NodeAccelerator informer: %w", err)
	}
	if _, err := naInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNodeAccelerator(obj, before) },
		UpdateFunc: func(_, obj any) { c.onNodeAccelerator(obj, before) },
		DeleteFunc: func(obj any) { c.onNodeAcceleratorDelete(obj, before) },
	}); err != nil {
		return nil, fmt.Errorf("NodeAccelerator handler: %w", err)
	}
	saInf, err := informers.GetInformer(ctx, &slicerv1alpha1.SliceAllocation{})
	if err != nil {
		return nil, fmt.Errorf("SliceAllocation informer: %w", err)
	}
	if _, err := saInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onAllocation(obj, before) },
		UpdateFunc: func(_, obj any) { c.onAllocation(obj, before) },
		DeleteFunc: func(obj any) { c.onAllocationDelete(obj, before) },
	}); err != nil {
		return nil, fmt.Errorf("SliceAllocation handler: %w", err)
	}
	fenceInf, err := informers.GetInformer(ctx, nodeMetadata())
	if err != nil {
		return nil, fmt.Errorf("node fence informer: %w", err)
	}
	if err := feedFences(fenceInf, c); err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		select {
		case err := <-errc:
			return nil, fmt.Errorf("informers stopped before sync: %w", err)
		default:
			return nil, errors.New("informers did not sync before the context ended")
		}
	}
	return informers, nil
}

func (c *Cache) onNodeAccelerator(obj any, before func(client.Object, bool)) {
	if na, ok := obj.(*slicerv1alpha1.NodeAccelerator); ok {
		before(na, false)
		c.SetNodeAccelerator(na)
	}
}

func (c *Cache) onNodeAcceleratorDelete(obj any, before func(client.Object, bool)) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if na, ok := obj.(*slicerv1alpha1.NodeAccelerator); ok {
		before(na, true)
		c.DeleteNodeAccelerator(na.Name)
	}
}

func (c *Cache) onAllocation(obj any, before func(client.Object, bool)) {
	if a, ok := obj.(*slicerv1alpha1.SliceAllocation); ok {
		before(a, false)
		c.SetAllocation(AllocationFromObject(a))
	}
}

func (c *Cache) onAllocationDelete(obj any, before func(client.Object, bool)) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if a, ok := obj.(*slicerv1alpha1.SliceAllocation); ok {
		before(a, true)
		c.DeleteAllocation(a.Namespace, a.Name)
	}
}
