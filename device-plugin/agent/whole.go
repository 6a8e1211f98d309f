package agent

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// Whole GPUs (docs/gpu-modes.md, "Asking for whole GPUs"): an allocation with spec.wholeGPU
// holds its GPU with MIG mode off. There is nothing to create: once the GPU is whole (its
// agent switches it, modes.go) the allocation is bound to it as a slice at mig.WholeSlot, so
// the rest of the pass treats both alike: its CDI spec is the whole GPU's (cdi.WriteWhole),
// its device the GPU's UUID under nvidia.com/gpu (deviceFor), and it turns Ready once the
// kubelet lists that device (awaitKubelet). Releasing one destroys nothing; it waits only
// while the kubelet still lists the GPU as assigned to a pod. A GPU is never handed out
// whole while it is in, or has a change pending to, MIG mode.

// ReasonSwapped: the kubelet gave the GPU the allocation holds to another pod, and the pod
// holds no other of the node's GPUs in its place yet.
const ReasonSwapped = "Swapped"

// bindWhole settles the whole-GPU wants (live and deleting) into p, given the GPUs observed
// and the kubelet's usage (device ID → pod; a whole GPU's device ID is its UUID). The
// kubelet's truth comes first: a live want whose GPU the kubelet assigned to another pod is
// bound to a GPU the kubelet assigned to its own pod that none of that pod's other wants
// holds (it is recorded as the allocation's actual GPU). It is pure.
func bindWhole(p *Plan, obs *engine.Observation, wants []Want, ready map[types.NamespacedName]bool, usage map[string]string) {
	wants = append([]Want(nil), wants...)
	sort.Slice(wants, func(i, j int) bool { return wants[i].Key.String() < wants[j].Key.String() })
	holder := map[string]types.NamespacedName{} // GPU UUID → the live want bound to it
	gpus := map[string][]string{}               // pod → the node's GPUs the kubelet assigned it, sorted
	for _, g := range obs.GPUs {
		if pod, ok := usage[g.UUID]; ok {
			gpus[pod] = append(gpus[pod], g.UUID)
		}
	}
	var live []Want
	for _, w := range wants {
		if !w.Deleting {
			live = append(live, w)
		}
	}
	bind := func(w Want, uuid string) {
		holder[uuid] = w.Key
		g := obs.GPUByUUID(uuid)
		why := notWhole(g)
		if why[0] == "" && !ready[w.Key] && !g.Healthy {
			// No GPU is handed out unhealthy; one already handed out stays advertised, unhealthy.
			why = [2]string{slicerv1alpha1.ReasonGPUUnhealthy, g.UnusableWhole()}
		}
		if why[0] == "" && !ready[w.Key] && g.MIGModePending {
			why = [2]string{ReasonWaitingForModeSwitch, fmt.Sprintf("GPU %s has a change to MIG mode pending; it is handed out whole once the change is undone", uuid)}
		}
		if why[0] != "" {
			p.Blocked[w.Key] = why
			return
		}
		p.Bound[w.Key] = engine.Slice{Slot: mig.WholeSlot(uuid), GI: -1, CI: -1}
	}
	// 1. Wants at a GPU the kubelet assigned to their own pod, or to no pod.
	var moved []Want
	for _, w := range live {
		uuid := w.desired().GPU
		pod, used := usage[uuid]
		switch {
		case used && pod != w.Pod:
			moved = append(moved, w)
		case holder[uuid] != (types.NamespacedName{}):
			p.Conflict[w.Key] = fmt.Sprintf("GPU %s is already held whole by %s", uuid, holder[uuid])
		default:
			bind(w, uuid)
		}
	}
	// 2. Wants whose GPU the kubelet gave another pod take one the kubelet gave their pod.
	for _, w := range moved {
		taken := false
		for _, uuid := range gpus[w.Pod] {
			if holder[uuid] == (types.NamespacedName{}) {
				bind(w, uuid)
				taken = true
				break
			}
		}
		if !taken {
			p.Blocked[w.Key] = [2]string{ReasonSwapped, fmt.Sprintf("the kubelet gave GPU %s to pod %s; waiting for the GPU it gives this allocation's pod", w.desired().GPU, usage[w.desired().GPU])}
		}
	}
	// 3. Deleting wants destroy nothing; they wait while a pod still has the GPU.
	for _, w := range wants {
		if !w.Deleting {
			continue
		}
		uuid := w.desired().GPU
		if pod, used := usage[uuid]; used && holder[uuid] == (types.NamespacedName{}) {
			p.ReleaseWait[w.Key] = fmt.Sprintf("GPU %s is still assigned to pod %s", uuid, pod)
			continue
		}
		p.Release[w.Key] = nil
	}
}

// notWhole says why GPU g cannot serve as a whole GPU now (reason, message), zero when it can:
// it is missing or in MIG mode.
func notWhole(g *engine.GPU) [2]string {
	switch {
	case g == nil:
		return [2]string{slicerv1alpha1.ReasonGPUNotFound, "the GPU is not on the node"}
	case g.MIGMode == nvml.MIGEnabled:
		return [2]string{slicerv1alpha1.ReasonMIGModeOn, fmt.Sprintf("GPU %s is in MIG mode; it is handed out whole once its MIG mode is off", g.UUID)}
	}
	return [2]string{}
}

// resourceOf is the extended resource a slot is advertised under: nvidia.com/gpu for a whole
// GPU, slicer.dev/mig-<profile> for a slice.
func resourceOf(s mig.Slot) string {
	if s.Whole() {
		return migapi.NVIDIAGPUResource
	}
	return mig.ResourceName(s.Profile)
}

// readyWhole is the Ready status of a whole-GPU allocation bound to s: no MIG device, no
// instance ids; the GPU the kubelet gave the pod when it is not the one the spec names.
func readyWhole(a *slicerv1alpha1.SliceAllocation, s engine.Slice) slicerv1alpha1.SliceAllocationStatus {
	st := base(a)
	st.State = slicerv1alpha1.AllocationReady
	st.Message = "GPU " + s.GPU + " is ready whole (MIG mode off)"
	if s.GPU != a.Spec.GPUUUID {
		st.ActualGPUUUID = s.GPU
		st.Message = fmt.Sprintf("the kubelet gave the pod GPU %s whole", s.GPU)
	}
	return st
}
