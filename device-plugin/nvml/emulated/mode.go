package emulated

import (
	"fmt"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// MIG mode and topology, as docs/design/geometry.md ("MIG mode") says real NVML behaves:
//
//   - SetMIGMode fails with ERROR_IN_USE while the GPU has a GPU instance and changes nothing;
//   - asking for the current mode succeeds at once (activation SUCCESS) and cancels a pending
//     change;
//   - while a client holds the GPU (HoldGPU, as DCGM would) the change stays pending with
//     activation ERROR_IN_USE, on every generation: call again once it is released;
//   - otherwise on Ampere (A100, A30) the change stays pending with activation
//     ERROR_RESET_REQUIRED until ResetGPU (or Reboot); on Hopper and later it is current at
//     once (activation SUCCESS);
//   - each call takes Options.MIGModeLatency first; the mode is in the state file.
//
// The topology: GPUs 2k and 2k+1 are NVLink peers behind one PCIe switch (as the bridged
// pairs of an H100 NVL machine), and the pairs are split over two NUMA nodes, the first half
// on node 0 (see Link).

// Operation names of the calls in this file.
const (
	OpSetMIGMode = "DeviceSetMigMode"
	OpTopology   = "DeviceGetTopologyCommonAncestor"
	OpP2PStatus  = "DeviceGetP2PStatus"
)

// ModeOps lists the operations of this file, which Ops does not (the agent's existing paths
// make none of these calls), in a stable order. They fail, slow down and crash like the others.
func ModeOps() []string { return []string{OpSetMIGMode, OpTopology, OpP2PStatus} }

func (d *device) MIGMode() (current, pending nvml.MIGMode, err error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	g := d.gpu()
	return g.migMode, g.pendingMode, d.b.call(OpMIGMode)
}

func (d *device) SetMIGMode(mode nvml.MIGMode) (nvml.Return, error) {
	const op = OpSetMIGMode
	b := d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(op); err != nil {
		return nvml.Success, err
	}
	if b.opts.MIGModeLatency > 0 {
		b.sleep(b.opts.MIGModeLatency)
		if b.crashed {
			return nvml.Success, b.deadErr(op)
		}
	}
	if mode != nvml.MIGEnabled && mode != nvml.MIGDisabled {
		return nvml.Success, nvml.NewError(op, nvml.ErrorInvalidArgument, fmt.Sprintf("no MIG mode %d", int(mode)))
	}
	g := d.gpu()
	if len(g.gis) > 0 {
		return nvml.Success, nvml.NewError(op, nvml.ErrorInUse, fmt.Sprintf("GPU %d has %d GPU instance(s)", g.index, len(g.gis)))
	}
	g.pendingMode = mode
	activation := nvml.Success
	switch {
	case mode == g.migMode:
	case g.held:
		activation = nvml.ErrorInUse
	case g.model.ModeChangeNeedsReset():
		activation = nvml.ErrorResetRequired
	default:
		g.migMode = mode
	}
	if err := b.saveLocked(); err != nil {
		return nvml.Success, nvml.NewError(op, nvml.ErrorUnknown, err.Error())
	}
	b.done(op)
	return activation, nil
}

// HoldGPU makes a client hold GPU index (as DCGM or a monitoring daemon does) or releases
// it: while held, a MIG mode change stays pending and ResetGPU is refused. A hold is a
// process's, not the GPU's: it is not in the state file, and Reboot ends it.
func (b *Backend) HoldGPU(index int, held bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if index < 0 || index >= len(b.gpus) {
		return fmt.Errorf("no GPU %d", index)
	}
	b.gpus[index].held = held
	return nil
}

var _ nvml.GPUResetter = (*Backend)(nil)

// ResetGPU resets GPU index (nvidia-smi -r): its pending MIG mode becomes current, its MIG
// instances are gone and its recovery action is cleared. It fails with ERROR_IN_USE while a
// client holds the GPU or a process uses one of its MIG devices.
func (b *Backend) ResetGPU(index int) error {
	const op = "DeviceReset"
	b.mu.Lock()
	defer b.mu.Unlock()
	if index < 0 || index >= len(b.gpus) {
		return nvml.NewError(op, nvml.ErrorInvalidArgument, fmt.Sprintf("no GPU %d", index))
	}
	g := b.gpus[index]
	if g.held {
		return nvml.NewError(op, nvml.ErrorInUse, fmt.Sprintf("a client holds GPU %d", index))
	}
	for _, gi := range g.gis {
		for _, ci := range gi.cis {
			if b.inUse[ci.uuid] {
				return nvml.NewError(op, nvml.ErrorInUse, fmt.Sprintf("MIG device %s is in use", ci.uuid))
			}
		}
	}
	b.resetLocked(g)
	return b.saveLocked()
}

// resetLocked is what a GPU reset does to g (b.mu held).
func (b *Backend) resetLocked(g *gpu) {
	for _, gi := range g.gis {
		for _, ci := range gi.cis {
			delete(b.inUse, ci.uuid)
		}
	}
	g.gis = map[int]*gpuInstance{}
	g.state = mig.EmptyGPU(g.model)
	g.recovery = nvml.RecoveryNone
	g.migMode = g.pendingMode
}

// Link is the emulated topology between GPUs i and j of a node with n GPUs (i != j): GPUs 2k
// and 2k+1 are NVLink peers behind one PCIe switch; the pairs are split over two NUMA nodes,
// the first ceil(pairs/2) on node 0; GPUs of different pairs on one NUMA node meet at it.
func Link(n, i, j int) (level nvml.TopologyLevel, nvlink bool) {
	if i/2 == j/2 {
		return nvml.TopologySingle, true
	}
	if numaNode(n, i) == numaNode(n, j) {
		return nvml.TopologyNode, false
	}
	return nvml.TopologySystem, false
}

// numaNode is the emulated NUMA node of GPU i of n.
func numaNode(n, i int) int {
	pairs := (n + 1) / 2
	return (i / 2) * 2 / pairs
}

// peerIndex is the index of other, a device of this backend.
func (d *device) peerIndex(op string, other nvml.Device) (int, error) {
	o, ok := other.(*device)
	if !ok || o.b != d.b {
		return 0, nvml.NewError(op, nvml.ErrorInvalidArgument, "the other device is not of this emulated NVML")
	}
	if o.index == d.index {
		return 0, nvml.NewError(op, nvml.ErrorInvalidArgument, "a GPU has no topology to itself")
	}
	return o.index, nil
}

func (d *device) TopologyCommonAncestor(other nvml.Device) (nvml.TopologyLevel, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if err := d.b.call(OpTopology); err != nil {
		return nvml.TopologySystem, err
	}
	j, err := d.peerIndex(OpTopology, other)
	if err != nil {
		return nvml.TopologySystem, err
	}
	level, _ := Link(len(d.b.gpus), d.index, j)
	return level, nil
}

func (d *device) NVLinkPeer(other nvml.Device) (bool, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if err := d.b.call(OpP2PStatus); err != nil {
		return false, err
	}
	j, err := d.peerIndex(OpP2PStatus, other)
	if err != nil {
		return false, err
	}
	_, nvlink := Link(len(d.b.gpus), d.index, j)
	return nvlink, nil
}
