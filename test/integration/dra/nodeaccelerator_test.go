package dra

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
)

// nodeAccelerator reads the node's NodeAccelerator (nil while there is none).
func (h *harness) nodeAccelerator() (*slicerv1alpha1.NodeAccelerator, error) {
	var na slicerv1alpha1.NodeAccelerator
	if err := h.status.Get(context.Background(), types.NamespacedName{Name: nodeName}, &na); err != nil {
		return nil, err
	}
	return &na, nil
}

// slicesOf lists the NodeAccelerator's slices as "gpu-<index> <profile>@<start>+<size>
// <state> <holder>", the holder being the claim reference (namespace/name uid device) or
// the allocation, "-" for none.
func slicesOf(na *slicerv1alpha1.NodeAccelerator) []string {
	var out []string
	for _, g := range na.Status.GPUs {
		for _, s := range g.Slices {
			holder := "-"
			switch {
			case s.Claim != nil:
				holder = fmt.Sprintf("claim %s/%s %s %s", s.Claim.Namespace, s.Claim.Name, s.Claim.UID, s.Claim.Device)
			case s.Allocation != nil:
				holder = "allocation " + s.Allocation.Namespace + "/" + s.Allocation.Name
			}
			out = append(out, fmt.Sprintf("gpu-%d %s@%d+%d %s %s", g.Index, s.Profile, s.Placement.Start, s.Placement.Size, s.State, holder))
		}
	}
	return out
}

// waitSlices waits until the NodeAccelerator shows exactly want (in GPU, then observed order).
func (h *harness) waitSlices(what string, want ...string) {
	h.t.Helper()
	waitFor(h.t, what, func() (bool, error) {
		na, err := h.nodeAccelerator()
		if err != nil {
			return false, err
		}
		got := slicesOf(na)
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Errorf("slices %q, want %q", got, want)
	})
}

// In DRA mode the plugin writes the NodeAccelerator the device-plugin agent writes: the GPUs
// with model, health and MIG mode, Ready; a prepared claim's instance Allocated with that
// claim at exactly its GPU and placement; an instance no claim holds Orphaned; nothing once
// the claim is unprepared; DriverNotReady while NVML is unusable.
func TestNodeAcceleratorInDRAMode(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	start := time.Now()
	waitFor(t, "the NodeAccelerator", func() (bool, error) {
		na, err := h.nodeAccelerator()
		if err != nil {
			return false, err
		}
		if na.Spec.NodeName != nodeName || na.Status.Driver != slicerv1alpha1.DriverStateEmulated || na.Status.DriverVersion != emulated.DriverVersion {
			return false, fmt.Errorf("spec %+v, driver %q %q", na.Spec, na.Status.Driver, na.Status.DriverVersion)
		}
		if len(na.Status.GPUs) != 2 {
			return false, fmt.Errorf("GPUs %+v", na.Status.GPUs)
		}
		for i, g := range na.Status.GPUs {
			if g.Index != int32(i) || g.UUID != emulated.GPUUUID(nodeName, i) || g.Model != "H100-80GB" ||
				g.Health != slicerv1alpha1.GPUHealthy || g.MIGMode != slicerv1alpha1.MIGModeEnabled || len(g.Slices) != 0 {
				return false, fmt.Errorf("GPU %d: %+v", i, g)
			}
		}
		if !meta.IsStatusConditionTrue(na.Status.Conditions, slicerv1alpha1.ConditionReady) ||
			!meta.IsStatusConditionFalse(na.Status.Conditions, slicerv1alpha1.ConditionDriverNotReady) {
			return false, fmt.Errorf("conditions %+v", na.Status.Conditions)
		}
		return true, nil
	})
	t.Logf("NodeAccelerator complete %s after the plugin's socket", time.Since(start).Round(time.Millisecond))

	a := h.allocate("a", "gpu-1-3g-40gb-at-4")
	writes := h.statusWrites.Load()
	h.prepare(a)
	held := fmt.Sprintf("gpu-1 3g.40gb@4+4 Allocated claim default/a %s gpu-1-3g-40gb-at-4", a.UID)
	h.waitSlices("the prepared claim's slice", held)
	t.Logf("status writes from Prepare to the slice shown: %d", h.statusWrites.Load()-writes)

	// An instance no claim holds is Orphaned (and stays until its grace passes).
	if _, err := h.lib.CreateInstance(0, "1g.10gb", 6, false); err != nil {
		t.Fatal(err)
	}
	if err := h.plugin.drv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitSlices("the orphan", "gpu-0 1g.10gb@6+1 Orphaned -", held)

	// A claim allocated the orphan's device (not prepared yet) makes it that claim's, and its
	// deletion an orphan again, with no sync asked by the test: the claim informer's events
	// bring the syncs.
	late := h.allocate("late", "gpu-0-1g-10gb-at-6")
	h.waitSlices("the orphan held by a claim", fmt.Sprintf("gpu-0 1g.10gb@6+1 Allocated claim default/late %s gpu-0-1g-10gb-at-6", late.UID), held)
	h.deleteClaim(late)
	h.waitSlices("the claim's deletion", "gpu-0 1g.10gb@6+1 Orphaned -", held)

	// A sync that changes nothing writes nothing.
	writes = h.statusWrites.Load()
	if err := h.plugin.drv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.statusWrites.Load() - writes; n != 0 {
		t.Fatalf("%d status writes from a sync that changed nothing", n)
	}

	h.unprepare(a)
	h.waitSlices("the unprepared claim's slice gone", "gpu-0 1g.10gb@6+1 Orphaned -")
	h.deleteClaim(a)

	// NVML unusable: the next sync says so, and the next after it recovers says Ready.
	if err := h.lib.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := h.plugin.drv.Sync(ctx); err == nil {
		t.Fatal("a sync with NVML shut down succeeded")
	}
	na, err := h.nodeAccelerator()
	if err != nil {
		t.Fatal(err)
	}
	if na.Status.Driver != slicerv1alpha1.DriverStateNotReady || !meta.IsStatusConditionTrue(na.Status.Conditions, slicerv1alpha1.ConditionDriverNotReady) ||
		!meta.IsStatusConditionFalse(na.Status.Conditions, slicerv1alpha1.ConditionReady) || len(na.Status.GPUs) != 0 {
		t.Fatalf("with NVML down: driver %q, GPUs %d, conditions %+v", na.Status.Driver, len(na.Status.GPUs), na.Status.Conditions)
	}
	if err := h.lib.Init(); err != nil {
		t.Fatal(err)
	}
	if err := h.plugin.drv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if na, err = h.nodeAccelerator(); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(na.Status.Conditions, slicerv1alpha1.ConditionReady) || len(na.Status.GPUs) != 2 {
		t.Fatalf("after NVML is back: GPUs %d, conditions %+v", len(na.Status.GPUs), na.Status.Conditions)
	}
}
