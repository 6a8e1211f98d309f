package main

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/framework"
)

// instantRealizer is the plugin's client in the scheduling-only phase: it
// creates each SliceAllocation as the plugin asks, then at once writes its
// status Ready (the fake agent's status write, made synchronously in the
// plugin's PreBind instead of by an agent's queue). The plugin is unchanged:
// PreBind still waits until its own informer shows Ready. The status write
// goes through the realizer's client, counted apart from the scheduler's.
type instantRealizer struct {
	client.Client
	realizer client.Client
}

// Create implements client.Writer.
func (c instantRealizer) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.Client.Create(ctx, obj, opts...); err != nil {
		return err
	}
	sa, ok := obj.(*slicerv1alpha1.SliceAllocation)
	if !ok {
		return nil
	}
	ready := sa.DeepCopy()
	ready.Status = slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationReady,
		MIGDeviceUUID: framework.FakeMIGUUID(sa), ObservedGeneration: sa.Generation}
	if err := c.realizer.Status().Update(ctx, ready); err != nil {
		return fmt.Errorf("instant realization of %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	return nil
}
