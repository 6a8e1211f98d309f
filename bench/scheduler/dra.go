package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// The dra-sched phase publishes what Slicer's DRA frontend publishes (device-plugin/dra):
// every node's pool of MIG devices from migdra.Pool in the preferred order of empty GPUs, and
// one DeviceClass per H100 profile with its extended resource name. Nothing republishes while
// pods are placed, as no agent runs: the allocator's counters keep the placements exact, and
// only the device order (not measured here) would follow the occupancy.

// createDeviceClasses installs the DeviceClass of every H100-80GB profile.
func createDeviceClasses(ctx context.Context, c client.Client) error {
	m, err := mig.ParseModel("H100-80GB")
	if err != nil {
		return err
	}
	var profiles []string
	for _, p := range m.Profiles() {
		profiles = append(profiles, p.Name)
	}
	classes, err := migdra.DeviceClasses(profiles, true)
	if err != nil {
		return err
	}
	for i := range classes {
		if err := c.Create(ctx, &classes[i]); err != nil {
			return fmt.Errorf("device class %s: %w", classes[i].Name, err)
		}
	}
	return nil
}

// createPool creates the ResourceSlices of a node with gpus empty H100-80GB in MIG mode. With
// profiles set, only those profiles' devices are published (the counter sets stay whole).
func createPool(ctx context.Context, c client.Client, node string, gpus int, profiles []string) error {
	m, err := mig.ParseModel("H100-80GB")
	if err != nil {
		return err
	}
	in := make([]migdra.GPU, 0, gpus)
	for i := range gpus {
		in = append(in, migdra.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), State: mig.EmptyGPU(m), MIGEnabled: true, Healthy: true})
	}
	pool, err := migdra.Pool(in, mig.PreferredOrder)
	if err != nil {
		return err
	}
	if len(profiles) > 0 {
		kept := pool.Slices[:0]
		for _, sl := range pool.Slices {
			if len(sl.Devices) == 0 || slices.Contains(profiles, profileOf(sl.Devices[0])) {
				kept = append(kept, sl)
			}
		}
		pool.Slices = kept
	}
	devices, consumed := 0, 0
	for _, sl := range pool.Slices {
		devices += len(sl.Devices)
		for _, d := range sl.Devices {
			for _, cc := range d.ConsumesCounters {
				consumed += len(cc.Counters)
			}
		}
	}
	poolShape.Store(fmt.Sprintf("%d slices, %d devices, %d counter consumptions per node", len(pool.Slices), devices, consumed))
	for i, sl := range pool.Slices {
		obj := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", node, i)},
			Spec: resourceapi.ResourceSliceSpec{Driver: migdra.DriverName, NodeName: ptr.To(node),
				Pool:    resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				Devices: sl.Devices, SharedCounters: sl.SharedCounters},
		}
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("resource slice %s: %w", obj.Name, err)
		}
	}
	return nil
}

// poolShape describes the last pool createPool published, for the report.
var poolShape atomic.Value

// profileOf is the profile attribute of a MIG device.
func profileOf(d resourceapi.Device) string {
	if a, ok := d.Attributes[migdra.AttrProfile]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}
