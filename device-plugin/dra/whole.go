package dra

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// Whole GPUs and MIG mode switches in DRA mode (docs/design/whole-gpus.md, "DRA"). With the
// Slicer's spec.gpuModes (Options.GPUModes), each GPU gets the policy that selects it
// (engine.ModePolicies, as on the device-plugin path). A GPU its policy lets Slicer switch
// (Dynamic; on A100 and A30 with allowReset) is published whole and sliced at once
// (migdra.GPU.Switchable), a GPU whose fixed policy names the other mode than its own is not
// published until it is switched, and every other GPU as its mode is.
//
// Prepare switches a GPU when the device the claim was allocated needs the other mode: a
// whole GPU on a GPU in MIG mode, a MIG device on a GPU in whole mode. It switches only an
// empty GPU (engine.DecideModeSwitch): for a whole GPU, the MIG instances left on it are no
// claim's (the allocator gave out the whole device, whose counters exclude every MIG device of
// the GPU, and no record keeps one: checked first), so they are destroyed first; for a MIG
// device, no other claim may hold the GPU whole. A switch that does not take effect at once
// (a client holds the GPU, a reset is needed) fails the claim with its reason, and the
// kubelet retries. Each sync also decides every GPU's switch from the allocated claims and
// the records (modeSteps), so a switch starts as soon as a claim is allocated, a fixed policy
// is applied once its GPU is empty, and the NodeAccelerator says why a switch waits. Nothing
// is remembered: each pass starts from the mode NVML reports.

// modeSwitchable reports whether the driver may switch g's MIG mode under policy p: Dynamic,
// a healthy GPU of a MIG model Slicer knows, and a model whose change needs a GPU reset only
// with allowReset (migapi.Switchable says the same of the NodeAccelerator status).
func modeSwitchable(g *engine.GPU, p migapi.ModePolicy) bool {
	return p.Mode == slicerv1alpha1.GPUModePolicyDynamic && !p.NotMIGCapable && g.Err == nil && g.MIGSupported && g.Model.Valid() &&
		(!g.Model.ModeChangeNeedsReset() || p.AllowReset)
}

// policyHides reports whether g's fixed policy names the other mode than the one g is in (or
// is pending to leave): such a GPU takes no new claim until it is switched (migapi.PolicyBlocks).
func policyHides(g *engine.GPU, p migapi.ModePolicy) bool {
	if p.NotMIGCapable || !g.MIGSupported || !g.Model.Valid() {
		return false
	}
	inMIG := g.MIGMode == nvml.MIGEnabled && !g.MIGModePending
	whole := g.MIGMode == nvml.MIGDisabled && !g.MIGModePending
	switch p.Mode {
	case slicerv1alpha1.GPUModePolicyWhole:
		return !whole
	case slicerv1alpha1.GPUModePolicyMIG:
		return !inMIG
	}
	return false
}

// wholeUnusable says why g (nil: not on the node) cannot be handed out whole now, "" when it
// can: unhealthy, or MIG mode on or a change of it pending.
func wholeUnusable(g *engine.GPU) string {
	if why := g.UnusableWhole(); why != "" {
		return why
	}
	if g.MIGSupported && (g.MIGMode == nvml.MIGEnabled || g.MIGModePending) {
		return fmt.Sprintf("GPU %d is in MIG mode or switching (MIG mode %s, %s pending)", g.Index, g.MIGMode, g.PendingMIGMode())
	}
	return ""
}

// inMIGMode reports whether g is in MIG mode with no change pending.
func inMIGMode(g *engine.GPU) bool {
	return g.MIGSupported && g.MIGMode == nvml.MIGEnabled && !g.MIGModePending
}

// prepareWhole prepares allocated whole GPU a of claim c: it refuses a GPU another claim's
// record keeps (a slice of it, or the GPU whole) or another allocated claim holds a MIG device
// of, switches a GPU in MIG mode out of it (switchFor), and returns the GPU's CDI description.
func (d *Driver) prepareWhole(obs *engine.Observation, modes map[string]migapi.ModePolicy, held map[string][]string, recs map[string]record,
	c *resourceapi.ResourceClaim, a allocated) (cdi.WholeGPU, error) {
	uid := string(c.UID)
	g := gpuByIndex(obs, a.GPU)
	if why := g.UnusableWhole(); why != "" {
		return cdi.WholeGPU{}, errors.New(why)
	}
	if other, kept := recordedOnGPU(recs, uid, g.UUID, true); kept {
		return cdi.WholeGPU{}, d.refuseConflict(c, a.Device, other)
	}
	if others := othersOnGPU(held, g.Index, uid, false); len(others) > 0 {
		return cdi.WholeGPU{}, fmt.Errorf("GPU %d has MIG devices allocated to claims %v", g.Index, others)
	}
	if g.MIGSupported && (g.MIGMode == nvml.MIGEnabled || g.MIGModePending) {
		if err := d.switchFor(obs, modes, g, engine.NeedWhole); err != nil {
			return cdi.WholeGPU{}, err
		}
		g = gpuByIndex(obs, a.GPU)
	}
	if why := wholeUnusable(g); why != "" {
		return cdi.WholeGPU{}, errors.New(why)
	}
	return engine.WholeCDI(g), nil
}

// prepareMIGMode makes the GPU of allocated MIG device a be in MIG mode: a GPU in whole mode
// (or switching) is switched (switchFor) unless another claim holds it whole (its record, or
// its allocation). A GPU already in MIG mode, or not on the node, is left to resolve.
func (d *Driver) prepareMIGMode(obs *engine.Observation, modes map[string]migapi.ModePolicy, held map[string][]string, recs map[string]record,
	c *resourceapi.ResourceClaim, a allocated) error {
	uid := string(c.UID)
	g := gpuByIndex(obs, a.GPU)
	if g == nil || !g.MIGSupported || g.Err != nil || inMIGMode(g) {
		return nil
	}
	if other, kept := recordedOnGPU(recs, uid, g.UUID, false); kept {
		return d.refuseConflict(c, a.Device, other)
	}
	if others := othersOnGPU(held, g.Index, uid, true); len(others) > 0 {
		return fmt.Errorf("GPU %d is allocated whole to claims %v", g.Index, others)
	}
	return d.switchFor(obs, modes, g, engine.NeedMIG)
}

// switchFor switches g to the mode need names, if its policy allows, and observes the node
// again (obs is replaced in place). For a whole GPU the instances on g are destroyed first
// (see the top of this file). It fails, with the reason, when the mode has not taken effect.
func (d *Driver) switchFor(obs *engine.Observation, modes map[string]migapi.ModePolicy, g *engine.GPU, need engine.ModeNeed) error {
	target := nvml.MIGEnabled
	if need == engine.NeedWhole {
		target = nvml.MIGDisabled
	}
	p, ok := modes[g.UUID]
	if !ok || !modeSwitchable(g, p) {
		return fmt.Errorf("GPU %d needs MIG mode %s for this device, and no GPU mode policy of the Slicer (spec.gpuModes) lets Slicer switch it%s",
			g.Index, target, resetWords(g, p, ok))
	}
	touched := false
	if need == engine.NeedWhole {
		for _, s := range g.Slices {
			if err := obs.DestroySlice(s, d.opts.Metrics); err != nil {
				return fmt.Errorf("GPU %d: the MIG instance at %s (no claim's) is in the way of the whole GPU: %w", g.Index, s.Slot, err)
			}
			d.opts.Metrics.OrphansReclaim.WithLabelValues("no_allocation").Inc()
			d.opts.Log.Info("MIG instance no claim holds destroyed for a whole GPU", "gpu", g.UUID, "slot", s.String())
			touched = true
		}
		if touched {
			if err := d.reobserve(obs); err != nil {
				return err
			}
			if g = obs.GPUByUUID(g.UUID); g == nil {
				return errors.New("the GPU is gone")
			}
		}
	}
	step := engine.DecideModeSwitch(g, engine.ModeInput{Policy: p, Need: need})
	reports, done, called, _ := engine.SwitchModes(obs, map[string]engine.ModeStep{g.UUID: step}, d.opts.Metrics, d.opts.Log)
	for u, t := range done {
		d.modeDone[u] = t
	}
	if called {
		if err := d.reobserve(obs); err != nil {
			return err
		}
	}
	now := obs.GPUByUUID(g.UUID)
	if now != nil && now.MIGSupported && now.MIGMode == target && !now.MIGModePending {
		return nil
	}
	why := "the switch has not taken effect"
	if r := reports[g.UUID]; r != nil {
		why = r.Message
	}
	return fmt.Errorf("GPU %d is being switched to MIG mode %s for this device: %s; the kubelet retries", g.Index, target, why)
}

// resetWords adds why a GPU with policy p (has: there is one) may not switch, where a reset is
// the reason.
func resetWords(g *engine.GPU, p migapi.ModePolicy, has bool) string {
	if has && p.Mode == slicerv1alpha1.GPUModePolicyDynamic && g.Model.ModeChangeNeedsReset() && !p.AllowReset {
		return fmt.Sprintf(" (on %s a switch needs a GPU reset, which the policy does not allow: allowReset)", g.Model)
	}
	return ""
}

// reobserve reads the GPUs again into obs.
func (d *Driver) reobserve(obs *engine.Observation) error {
	fresh, err := d.observe()
	if err != nil {
		return fmt.Errorf("observe GPUs: %w", err)
	}
	*obs = *fresh
	return nil
}

// recordedOnGPU is the record of a claim other than uid that keeps GPU gpuUUID whole, or, with
// slicesToo, a slice of it (the lowest UID).
func recordedOnGPU(recs map[string]record, uid, gpuUUID string, slicesToo bool) (record, bool) {
	for _, u := range sortedRecordUIDs(recs) {
		r := recs[u]
		if u == uid {
			continue
		}
		if slices.ContainsFunc(r.Whole, func(w cdi.WholeGPU) bool { return w.UUID == gpuUUID }) ||
			slicesToo && slices.ContainsFunc(r.Slices, func(s cdi.Slice) bool { return s.GPUUUID == gpuUUID }) {
			return r, true
		}
	}
	return record{}, false
}

// othersOnGPU lists the claims other than uid that held (device → claims) says hold a whole
// GPU (whole) or a MIG device (!whole) of GPU index i, sorted.
func othersOnGPU(held map[string][]string, i int, uid string, whole bool) []string {
	var out []string
	for name, uids := range held {
		gpu, err := migdra.DeviceGPU(name)
		if _, isWhole := migdra.ParseWholeDeviceName(name); err != nil || gpu != i || isWhole != whole {
			continue
		}
		out = append(out, otherClaims(uids, uid)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// modeSteps decides, for each GPU with a policy, what to do about its MIG mode on this sync
// (engine.DecideModeSwitch; pure): the need is the allocated claims' devices on the GPU (whole
// or MIG), and what holds it in its current mode is the claims allocated or recorded with a
// device of that mode there. None while another tool owns the node.
func modeSteps(obs *engine.Observation, modes map[string]migapi.ModePolicy, held map[string][]string, recs map[string]record, foreign bool) map[string]engine.ModeStep {
	if len(modes) == 0 || obs == nil || foreign {
		return nil
	}
	out := map[string]engine.ModeStep{}
	for _, g := range obs.GPUs {
		p, ok := modes[g.UUID]
		if !ok {
			continue
		}
		need, holders := engine.NeedNone, map[bool][]string{}
		for _, whole := range []bool{false, true} {
			for _, uid := range othersOnGPU(held, g.Index, "", whole) {
				need = need.Add(whole)
				holders[whole] = append(holders[whole], uid)
			}
		}
		for _, uid := range sortedRecordUIDs(recs) {
			r := recs[uid]
			if slices.ContainsFunc(r.Whole, func(w cdi.WholeGPU) bool { return w.UUID == g.UUID }) {
				holders[true] = append(holders[true], uid)
			}
			if slices.ContainsFunc(r.Slices, func(s cdi.Slice) bool { return s.GPUUUID == g.UUID }) {
				holders[false] = append(holders[false], uid)
			}
		}
		busy := ""
		if h := holders[g.MIGMode != nvml.MIGEnabled]; len(h) > 0 {
			slices.Sort(h)
			busy = "claim(s) " + strings.Join(slices.Compact(h), ", ") + " hold it"
		}
		out[g.UUID] = engine.DecideModeSwitch(g, engine.ModeInput{Policy: p, Need: need, Busy: busy})
	}
	return out
}

// switchModes carries out the sync's steps (engine.SwitchModes), observing the node again when
// a call was made, and returns the switch each GPU reports and the calls that made a mode
// current at once (with those Prepare made since the last sync).
func (d *Driver) switchModes(obs *engine.Observation, steps map[string]engine.ModeStep) (map[string]*engine.ModeReport, map[string]time.Duration, error) {
	if len(steps) == 0 {
		return nil, d.takeModeDone(), nil
	}
	reports, done, called, _ := engine.SwitchModes(obs, steps, d.opts.Metrics, d.opts.Log)
	for u, t := range done {
		d.modeDone[u] = t
	}
	if called {
		if err := d.reobserve(obs); err != nil {
			return reports, d.takeModeDone(), err
		}
	}
	return reports, d.takeModeDone(), nil
}

// takeModeDone hands the switch durations gathered since the last status write to this one.
func (d *Driver) takeModeDone() map[string]time.Duration {
	out := d.modeDone
	d.modeDone = map[string]time.Duration{}
	return out
}
