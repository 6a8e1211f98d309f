// Package engine is the node engine both frontends of the agent stand on: the device-plugin
// frontend (device-plugin/agent with device-plugin/plugin) and the DRA frontend
// (device-plugin/dra). It owns what the two share and must compute the same way:
//
//   - observe.go: the GPUs and their MIG instances as NVML shows them (Observe), and whether
//     a GPU can serve MIG devices (GPU.MIGReady, GPU.Unusable);
//   - health.go, xid.go: GPU and MIG-instance health from NVML's events (Health: the
//     watcher, the XID classification, Apply to an observation);
//   - realize.go: the realizer, the only code that creates and destroys MIG instances;
//   - owner.go: whether another tool owns the node's MIG devices (Foreign);
//   - orphan.go: the orphan clock (OrphanClock): when an instance nothing holds is destroyed;
//   - cdi.go: an observed slice as a CDI spec describes it (CDISlice);
//   - mode.go, modeswitch.go: each GPU's mode as NVML reports it, and what to do about its
//     MIG mode under a GPU mode policy (DecideModeSwitch, SetModeStep, the GPU reset an A100 or
//     A30 needs; modepass.go: what both frontends do about modes on a pass);
//   - status.go, publish.go: the node's NodeAccelerator status, rendered from a NodeView and
//     written through StatusWriter (coalesced, never from a stale copy);
//   - metrics.go: the agent's Prometheus collectors and the per-GPU and per-slice recording.
//
// It imports neither frontend; neither frontend imports the other. What each frontend
// decides (which slice for which allocation or claim) stays in the frontend.
package engine
