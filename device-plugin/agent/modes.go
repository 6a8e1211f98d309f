package agent

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// GPU modes (docs/gpu-modes.md, "What the agent does"): with the Slicer's spec.gpuModes
// (Options.GPUModes), the agent applies to each GPU the policy that selects it
// (migapi.ModePolicyFor), writes it as status.gpus[].modePolicy and .resetAllowed, and
// switches an empty GPU's MIG mode to the one the policy, and for Dynamic the GPU's live
// allocations, ask for (engine.DecideModeSwitch). Without policies it switches nothing and
// writes neither field, as before GPU modes.

// ReasonWaitingForModeSwitch: an allocation waits (Pending) for its GPU's MIG mode to be
// switched to the mode it needs, which the GPU's policy allows.
const ReasonWaitingForModeSwitch = "WaitingForModeSwitch"

// waitsForMode says why allocation a waits for its GPU g's MIG mode, ok false when it does
// not: a slice on a GPU whose MIG mode is off, or a whole GPU on one in MIG mode, while the
// GPU's policy p lets the agent switch it to the mode a needs (on A100 and A30, with
// allowReset). A slice not realized yet also waits while a change of g's MIG mode is pending:
// it gets no instance on a GPU that is leaving MIG mode. switches: the agent has policies.
func waitsForMode(a *slicerv1alpha1.SliceAllocation, g *engine.GPU, p migapi.ModePolicy, switches bool) (string, bool) {
	if g == nil || !g.MIGSupported || !g.Model.Valid() || g.Err != nil {
		return "", false
	}
	if !switches {
		return "", false
	}
	if !a.Spec.WholeGPU && g.MIGMode == nvml.MIGEnabled && g.MIGModePending && a.Status.MIGDeviceUUID == "" {
		return fmt.Sprintf("GPU %s is switching out of MIG mode; the allocation's slice is made once it is back in MIG mode", g.UUID), true
	}
	need := engine.NeedNone.Add(a.Spec.WholeGPU)
	target, ok := engine.ModeTarget(p, need)
	asked := g.MIGModePending && g.PendingMIGMode() == target
	switch {
	case !ok:
		return "", false
	case g.Model.ModeChangeNeedsReset() && !p.AllowReset && !asked:
		// The switch fails (ResetNotAllowed): the allocation fails as before GPU modes.
		return "", false
	case a.Spec.WholeGPU && target == nvml.MIGDisabled && g.MIGMode == nvml.MIGEnabled:
		return fmt.Sprintf("GPU %s is switched out of MIG mode for this whole-GPU allocation (NodeAccelerator status.gpus[].modeSwitch says where it stands)", g.UUID), true
	case !a.Spec.WholeGPU && target == nvml.MIGEnabled && g.MIGMode != nvml.MIGEnabled:
		return fmt.Sprintf("GPU %s is switched to MIG mode for this slice (NodeAccelerator status.gpus[].modeSwitch says where it stands)", g.UUID), true
	}
	return "", false
}

// refusedByPolicy says why a slice allocation not realized yet is refused by its GPU's
// policy (Whole), "" when it is not.
func refusedByPolicy(a *slicerv1alpha1.SliceAllocation, g *engine.GPU, p migapi.ModePolicy, switches bool) string {
	if g == nil || !switches || a.Spec.WholeGPU || p.Mode != slicerv1alpha1.GPUModePolicyWhole || a.Status.State == slicerv1alpha1.AllocationReady || a.Status.MIGDeviceUUID != "" {
		return ""
	}
	return fmt.Sprintf("GPU %s's mode policy (spec.gpuModes) is Whole: it is kept whole, MIG mode off, and takes no MIG slice", g.UUID)
}

// modeSteps decides, for each GPU the agent has a policy for, what to do about its MIG mode
// on this pass (engine.DecideModeSwitch), from obs (observed after this pass's slice work)
// and the allocations as this pass leaves them (statuses: the ones it writes). It is pure.
func modeSteps(w world, obs *engine.Observation, statuses map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus) map[string]engine.ModeStep {
	if len(w.Modes) == 0 || obs == nil || w.Conflict.Present() {
		return nil
	}
	out := map[string]engine.ModeStep{}
	for _, g := range obs.GPUs {
		p, ok := w.Modes[g.UUID]
		if !ok {
			continue
		}
		need, holders := engine.NeedNone, map[bool][]string{}
		for _, k := range sortedKeys(w.Allocs) {
			a := w.Allocs[k]
			if wantFromAllocation(a).desired().GPU != g.UUID {
				continue
			}
			state := a.Status.State
			if st, ok := statuses[k]; ok {
				state = st.State
			}
			if _, gone := w.PodGone[k]; (gone || state == slicerv1alpha1.AllocationFailed) && a.DeletionTimestamp == nil {
				continue
			}
			if a.DeletionTimestamp == nil {
				need = need.Add(a.Spec.WholeGPU)
			}
			holders[a.Spec.WholeGPU] = append(holders[a.Spec.WholeGPU], k.String())
		}
		// What holds the GPU in its current mode: allocations of the kind it serves now, and
		// its devices the kubelet lists as assigned.
		var busy []string
		if held := holders[g.MIGMode != nvml.MIGEnabled]; len(held) > 0 {
			busy = append(busy, "allocation(s) "+strings.Join(held, ", ")+" hold it")
		}
		if pods := podsOnGPU(w.Usage, g.UUID); len(pods) > 0 {
			busy = append(busy, "the kubelet lists its devices as assigned to pod(s) "+strings.Join(pods, ", "))
		}
		out[g.UUID] = engine.DecideModeSwitch(g, engine.ModeInput{Policy: p, Need: need, Busy: strings.Join(busy, "; ")})
	}
	return out
}

// podsOnGPU lists the pods the kubelet's usage (device ID → pod) assigns a device of GPU uuid:
// the whole GPU (its ID is the UUID) or a slice of it (mig.Slot.DeviceID).
func podsOnGPU(usage map[string]string, uuid string) []string {
	seen := map[string]bool{}
	for id, pod := range usage {
		if id == uuid || strings.HasPrefix(id, uuid+"_") {
			seen[pod] = true
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
