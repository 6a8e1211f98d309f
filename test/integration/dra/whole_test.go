package dra

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// dynamicH100s lets the plugin switch every H100 (spec.gpuModes: Dynamic).
func dynamicH100s(h *harness) {
	h.gpuModes = []slicerv1alpha1.GPUModePolicy{{Model: "H100-80GB", Mode: slicerv1alpha1.GPUModePolicyDynamic}}
}

// poolDevices maps each device the node's ResourceSlices publish to whether it consumes
// counters.
func (h *harness) poolDevices() (map[string]bool, error) {
	list, err := h.cs.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range list.Items {
		if s.Spec.Driver != migdra.DriverName || s.Spec.Pool.Name != nodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			out[d.Name] = len(d.ConsumesCounters) > 0
		}
	}
	return out, nil
}

// gpuMode is GPU index i's mode and switch as the NodeAccelerator reports them.
func (h *harness) gpuMode(i int) (slicerv1alpha1.GPUMode, *slicerv1alpha1.GPUModeSwitch, error) {
	na, err := h.nodeAccelerator()
	if err != nil {
		return "", nil, err
	}
	for _, g := range na.Status.GPUs {
		if int(g.Index) == i {
			return g.Mode, g.ModeSwitch, nil
		}
	}
	return "", nil, nil
}

func (h *harness) sync() {
	h.t.Helper()
	if err := h.plugin.drv.Sync(context.Background()); err != nil {
		h.t.Fatalf("sync: %v", err)
	}
}

// Whole GPUs on the DRA frontend (issue 40, items 5 and 6), against a real apiserver with
// emulated H100s the Slicer lets the plugin switch: the pool publishes each GPU whole (its
// counters all consumed) and sliced; Prepare of the whole device switches the GPU out of MIG
// mode after destroying the instance no claim holds, and writes a CDI spec of the full GPU; a
// MIG device of that GPU is refused while the whole GPU is prepared, and once it is released
// Prepare switches the GPU back; a client holding the GPU keeps the switch pending (the claim
// fails, the NodeAccelerator says why) until it lets go; a crash right after the switch
// converges on the next Prepare; and without a policy the plugin switches nothing.
func TestWholeGPUClaimsSwitchTheGPU(t *testing.T) {
	h := newHarness(t, dynamicH100s)
	uuid0 := emulated.GPUUUID(nodeName, 0)

	waitFor(t, "each GPU published whole and sliced", func() (bool, error) {
		devs, err := h.poolDevices()
		return err == nil && devs["gpu-0"] && devs["gpu-1"] && devs["gpu-0-1g-10gb-at-0"], err
	})

	// An instance no claim holds sits on GPU 0 (an orphan within its grace).
	if _, err := h.lib.CreateInstance(0, "1g.10gb", 6, false); err != nil {
		t.Fatal(err)
	}
	whole := h.allocate("whole", "gpu-0")
	ids := h.prepare(whole)
	if got := ids["gpu-0"]; len(got) != 1 || got[0] != cdi.QualifiedName(string(whole.UID)+"_"+uuid0) {
		t.Fatalf("CDI device IDs %v", ids)
	}
	if n := len(h.instances()); n != 0 {
		t.Fatalf("%d instances left after the switch out of MIG mode", n)
	}
	spec, ok, err := h.cdi.ReadClaimSpec(string(whole.UID))
	if err != nil || !ok || len(spec.Whole) != 1 || spec.Whole[0].UUID != uuid0 || len(spec.Slices) != 0 {
		t.Fatalf("claim spec %+v ok=%v err=%v", spec, ok, err)
	}
	h.sync()
	if mode, sw, err := h.gpuMode(0); err != nil || mode != slicerv1alpha1.GPUModeWhole || sw != nil {
		t.Fatalf("GPU 0: mode %q switch %+v err %v, want whole", mode, sw, err)
	}
	h.prepare(whole) // a second Prepare finds the GPU whole and writes the same spec

	slice := h.allocate("slice", "gpu-0-1g-10gb-at-0")
	if r := h.prepareResult(slice); !strings.Contains(r.Error, "prepared for another claim") {
		t.Fatalf("a slice of the GPU prepared whole: %q", r.Error)
	}
	h.unprepare(whole)
	h.deleteClaim(whole)
	h.prepare(slice)
	if mode, _, err := h.gpuMode(0); err != nil || mode != slicerv1alpha1.GPUModeMIG {
		t.Fatalf("GPU 0 after the slice: mode %q err %v, want MIG", mode, err)
	}
	if _, ok := h.instances()["gpu-0-1g-10gb-at-0"]; !ok {
		t.Fatalf("instances %v, want the slice's", h.instances())
	}
	h.unprepare(slice)
	h.deleteClaim(slice)

	// A client (as DCGM would) holds GPU 1: the switch stays pending and the claim fails
	// with the reason; once it lets go, the next Prepare (the kubelet retries) finishes it.
	if err := h.lib.HoldGPU(1, true); err != nil {
		t.Fatal(err)
	}
	held := h.allocate("held", "gpu-1")
	if r := h.prepareResult(held); !strings.Contains(r.Error, "holds the GPU") {
		t.Fatalf("prepare under a holder: %q", r.Error)
	}
	h.sync()
	if mode, sw, err := h.gpuMode(1); err != nil || mode != slicerv1alpha1.GPUModeSwitching || sw == nil || sw.Reason != slicerv1alpha1.GPUModeSwitchHeldByClient {
		t.Fatalf("GPU 1 under a holder: mode %q switch %+v err %v", mode, sw, err)
	}
	if err := h.lib.HoldGPU(1, false); err != nil {
		t.Fatal(err)
	}
	h.prepare(held)
	h.unprepare(held)
	h.deleteClaim(held)

	// Killed right after the switch out of MIG mode, before the claim's spec (by the sync the
	// allocation starts, or by Prepare, whichever switches first): the next process reads the
	// mode back from NVML and prepares the claim.
	crash := h.allocate("crash", "gpu-1-7g-80gb-at-0")
	h.prepare(crash) // GPU 1 back in MIG mode
	h.unprepare(crash)
	h.deleteClaim(crash)
	again := h.allocate("again", "gpu-1")
	h.lib.CrashAfter(emulated.OpSetMIGMode, 1, func() { h.kill.Dead.Store(true) })
	waitFor(t, "the crash point", func() (bool, error) {
		_, _ = h.plugin.kubelet.NodePrepareResources(context.Background(), &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{ref(again)}})
		return h.lib.Crashed(), nil
	})
	h.crashRestart()
	h.prepare(again)
	if mode, _, err := h.gpuMode(1); err != nil || mode != slicerv1alpha1.GPUModeWhole {
		t.Fatalf("GPU 1 after the crash: mode %q err %v", mode, err)
	}
	h.unprepare(again)

	// Without a policy nothing is switched: GPU 0 (MIG mode) refuses a whole claim.
	h.stop()
	h.gpuModes = nil
	h.start()
	refused := h.allocate("refused", "gpu-0")
	if r := h.prepareResult(refused); !strings.Contains(r.Error, "no GPU mode policy") {
		t.Fatalf("prepare without a policy: %q", r.Error)
	}
}
