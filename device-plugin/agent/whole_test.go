package agent

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// twoGPUs is GPU-0 and GPU-1, H100s, each in MIG mode cur[i] with nothing pending.
func twoGPUs(cur0, cur1 nvml.MIGMode) *engine.Observation {
	g := func(uuid string, index int, cur nvml.MIGMode) *engine.GPU {
		return &engine.GPU{Index: index, UUID: uuid, Model: mig.H100_80GB, MIGSupported: true, MIGMode: cur, Healthy: true}
	}
	return &engine.Observation{GPUs: []*engine.GPU{g("GPU-0", 0, cur0), g("GPU-1", 1, cur1)}}
}

func wholeOn(name, pod, gpu string, mods ...func(*slicerv1alpha1.SliceAllocation)) *slicerv1alpha1.SliceAllocation {
	a := allocation(name, "", 0, 0, append([]func(*slicerv1alpha1.SliceAllocation){wholeGPU, onGPU(gpu)}, mods...)...)
	a.Spec.PodName = pod
	return a
}

// What a pass makes of whole-GPU allocations: bound to a GPU whose MIG mode is off, never to
// one in or going to MIG mode, the kubelet's choice first, released once no pod has the GPU.
func TestWholeGPUAllocations(t *testing.T) {
	const D, E = nvml.MIGDisabled, nvml.MIGEnabled
	ready := inState(slicerv1alpha1.AllocationReady)
	pendingMIG := func(o *engine.Observation) *engine.Observation { o.GPUs[0].MIGModePending = true; return o }
	sick := func(o *engine.Observation) *engine.Observation { o.GPUs[0].Healthy = false; return o }
	for _, tc := range []struct {
		name   string
		obs    *engine.Observation
		allocs []*slicerv1alpha1.SliceAllocation
		usage  map[string]string
		// bound: allocation → GPU it is bound to; statuses as settle leaves them (Ready comes
		// from writeDevices, so a bound allocation has none here).
		bound    map[string]string
		statuses []string
		release  []string
	}{
		{name: "a whole GPU is bound to its GPU", obs: twoGPUs(D, D),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0")}, bound: map[string]string{"a": "GPU-0"}},
		{name: "two GPUs of one pod", obs: twoGPUs(D, D),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a0", "p", "GPU-0"), wholeOn("a1", "p", "GPU-1")},
			bound:  map[string]string{"a0": "GPU-0", "a1": "GPU-1"}},
		{name: "a GPU in MIG mode is not handed out whole", obs: twoGPUs(E, D),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0")}, statuses: []string{"a=Failed/" + slicerv1alpha1.ReasonMIGModeOn}},
		{name: "nor one with a change to MIG mode pending", obs: pendingMIG(twoGPUs(D, D)),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0")}, statuses: []string{"a=Pending/" + ReasonWaitingForModeSwitch}},
		{name: "a Ready one stays bound while a change is pending", obs: pendingMIG(twoGPUs(D, D)),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0", ready)}, bound: map[string]string{"a": "GPU-0"}},
		{name: "no GPU is handed out unhealthy", obs: sick(twoGPUs(D, D)),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0")}, statuses: []string{"a=Pending/" + slicerv1alpha1.ReasonGPUUnhealthy}},
		{name: "one handed out stays, its device unhealthy", obs: sick(twoGPUs(D, D)),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0", ready)}, bound: map[string]string{"a": "GPU-0"}},
		{name: "two pods on one GPU: the second conflicts", obs: twoGPUs(D, D),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0"), wholeOn("b", "q", "GPU-0")},
			bound:  map[string]string{"a": "GPU-0"}, statuses: []string{"b=Failed/PlacementConflict"}},
		{name: "the kubelet's pod wins the GPU", obs: twoGPUs(D, D),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0"), wholeOn("b", "q", "GPU-0")}, usage: map[string]string{"GPU-0": "ns/q"},
			bound: map[string]string{"b": "GPU-0"}, statuses: []string{"a=Pending/" + ReasonSwapped}},
		{name: "a swap by the kubelet is followed", obs: twoGPUs(D, D),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0"), wholeOn("b", "q", "GPU-1")},
			usage:  map[string]string{"GPU-0": "ns/q", "GPU-1": "ns/p"},
			bound:  map[string]string{"a": "GPU-1", "b": "GPU-0"}},
		{name: "a deleting one waits while its pod has the GPU", obs: twoGPUs(D, D),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0", ready, deleting)}, usage: map[string]string{"GPU-0": "ns/p"},
			statuses: []string{"a=Releasing/" + slicerv1alpha1.ReasonInUse}},
		{name: "and goes once it does not", obs: twoGPUs(D, D),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("a", "p", "GPU-0", ready, deleting)}, release: []string{"a"}},
		{name: "whole and sliced GPUs side by side", obs: twoGPUs(E, D),
			allocs: []*slicerv1alpha1.SliceAllocation{wholeOn("w", "p", "GPU-1"), allocation("s", "1g.10gb", 0, 1)},
			bound:  map[string]string{"w": "GPU-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := world{Obs: tc.obs, Allocs: allocMap(tc.allocs...), Usage: tc.usage}
			d := decide(w)
			o := settle(w, d, logr.Discard())
			bound := map[string]string{}
			for k, s := range o.Bound {
				if !w.Allocs[k].Spec.WholeGPU {
					continue
				}
				bound[k.Name] = s.GPU
			}
			if tc.bound == nil {
				tc.bound = map[string]string{}
			}
			if diff := cmp.Diff(tc.bound, bound); diff != "" {
				t.Errorf("bound (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.statuses, statusStrings(o.Statuses)); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.release, keyNames(o.Released)); diff != "" {
				t.Errorf("released (-want +got):\n%s", diff)
			}
			for _, j := range d.Jobs {
				if j.slot.Whole() {
					t.Errorf("a MIG job for a whole GPU: %s", jobString(j))
				}
			}
		})
	}
}

// A whole GPU's Ready status names no MIG device; one the kubelet moved records the GPU.
func TestReadyWhole(t *testing.T) {
	a := wholeOn("a", "p", "GPU-0")
	got := readyWhole(a, engine.Slice{Slot: mig.WholeSlot("GPU-0"), GI: -1, CI: -1})
	if got.State != slicerv1alpha1.AllocationReady || got.MIGDeviceUUID != "" || got.GPUInstanceID != nil || got.ActualGPUUUID != "" {
		t.Errorf("readyWhole at its GPU = %+v", got)
	}
	got = readyWhole(a, engine.Slice{Slot: mig.WholeSlot("GPU-1"), GI: -1, CI: -1})
	if got.ActualGPUUUID != "GPU-1" {
		t.Errorf("readyWhole moved = %+v; want actualGPUUUID GPU-1", got)
	}
	if w := wantFromAllocation(&slicerv1alpha1.SliceAllocation{Spec: a.Spec, Status: got}); w.desired() != mig.WholeSlot("GPU-1") {
		t.Errorf("the want of a moved whole GPU is %v; want GPU-1 whole", w.desired())
	}
	if d := deviceFor(twoGPUs(nvml.MIGDisabled, nvml.MIGDisabled), engine.Slice{Slot: mig.WholeSlot("GPU-1"), GI: -1, CI: -1}); d.Resource != "nvidia.com/gpu" || d.ID != "GPU-1" || d.MIGUUID != "GPU-1" || !d.Healthy {
		t.Errorf("deviceFor a whole GPU = %+v", d)
	}
}
