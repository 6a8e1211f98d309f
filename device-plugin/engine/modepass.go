package engine

import (
	"time"

	"github.com/go-logr/logr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// What both frontends do about GPU modes on a pass (docs/gpu-modes.md, "What the agent does"):
// the policy that applies to each GPU (ModePolicies), and the switches carried out
// (SwitchModes) once the frontend has decided them (DecideModeSwitch).

// ModePolicies is the policy of policies that applies to each GPU of obs the agent may
// switch, by UUID: the healthy or not, fully identified GPUs of a MIG model, and the GPUs
// without MIG (always whole). A GPU of no model Slicer knows, one whose MIG mode was not read,
// and every GPU when policies is empty get none. A policy that does not convert (the CRD and
// --gpu-modes keep that from happening) leaves the GPU without one, logged.
func ModePolicies(policies []slicerv1alpha1.GPUModePolicy, obs *Observation, nodeLabels map[string]string, log logr.Logger) map[string]migapi.ModePolicy {
	if len(policies) == 0 || obs == nil {
		return nil
	}
	out := map[string]migapi.ModePolicy{}
	for _, g := range obs.GPUs {
		var model slicerv1alpha1.GPUModel
		switch {
		case g.MIGSupported && g.Model.Valid():
			model = slicerv1alpha1.GPUModel(g.Model.String())
		case g.MIGSupported || g.Err != nil:
			continue
		}
		p, err := migapi.ModePolicyFor(policies, model, nodeLabels)
		if err != nil {
			log.Error(err, "GPU mode policy not applied", "gpu", g.UUID)
			continue
		}
		out[g.UUID] = p
	}
	return out
}

// SwitchModes carries out steps on obs's GPUs (SetMIGMode where a step says so, each call
// counted in m) and returns the switch each GPU reports, how long each call that made a GPU's
// mode current at once took (done, by UUID; the status writer times the switch by it), and
// whether a call was made (obs is then stale) or a switch waits for something the agent should
// look at again soon (a client, an NVML error).
func SwitchModes(obs *Observation, steps map[string]ModeStep, m *Metrics, log logr.Logger) (reports map[string]*ModeReport, done map[string]time.Duration, called, retry bool) {
	reports, done = map[string]*ModeReport{}, map[string]time.Duration{}
	for _, g := range obs.GPUs {
		step, ok := steps[g.UUID]
		if !ok {
			continue
		}
		start := time.Now()
		r := SetModeStep(g, step)
		if step.Set || step.Reset {
			if m.ModeSwitchCalled(g, step, r) {
				done[g.UUID] = time.Since(start)
			}
			called = true
			log.Info("MIG mode switch asked", "gpu", g.UUID, "index", g.Index, "from", g.MIGMode.String(), "to", step.Target.String(), "reset", step.Reset, "result", reportWords(r))
		}
		if r != nil {
			reports[g.UUID] = r
			retry = retry || r.Reason == slicerv1alpha1.GPUModeSwitchHeldByClient || r.Reason == slicerv1alpha1.GPUModeSwitchNVMLError ||
				step.Reset && r.Reason == slicerv1alpha1.GPUModeSwitchResetRequired
		}
	}
	return reports, done, called, retry
}

func reportWords(r *ModeReport) string {
	if r == nil {
		return "done"
	}
	return string(r.Phase) + " " + string(r.Reason) + ": " + r.Message
}
