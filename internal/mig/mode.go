package mig

import "fmt"

// A GPU's MIG mode and what it can serve (docs/design/whole-gpus.md). Facts from NVIDIA's MIG
// user guide and go-nvml's nvml.h (nvmlDeviceGetMigMode returns the current and the pending
// mode, nvmlDeviceSetMigMode changes it): MIG operations fail with MIG off, a whole GPU
// (nvidia.com/gpu) needs MIG off, and a change is refused or stays pending while any client
// holds the GPU. Whether the node may switch a GPU (policy, and on A100/A30 a GPU reset) is the
// caller's input, GPU.Switchable.

// GPUMode is a GPU's MIG mode as NVML reports it. The zero value is MIG mode, what every
// caller that predates whole GPUs means.
type GPUMode uint8

const (
	// ModeMIG: MIG on, current and pending; the GPU hosts MIG slices only.
	ModeMIG GPUMode = iota
	// ModeWhole: MIG off, current and pending; the GPU runs as one device (nvidia.com/gpu).
	ModeWhole
	// ModeSwitching: the pending mode differs from the current one (a reset is due, or a
	// client holds the GPU). It serves nothing until NVML reports the change done.
	ModeSwitching
)

// String is the mode's name.
func (m GPUMode) String() string {
	switch m {
	case ModeMIG:
		return "MIG"
	case ModeWhole:
		return "whole"
	case ModeSwitching:
		return "switching"
	}
	return "GPUMode(invalid)"
}

// Use is whether a GPU can serve a kind of request, and at what price.
type Use uint8

const (
	// UseNo: the GPU cannot serve it.
	UseNo Use = iota
	// UseReady: the GPU serves it in the mode it is in.
	UseReady
	// UseAfterSwitch: the GPU serves it once its MIG mode is switched (it is empty and
	// switchable).
	UseAfterSwitch
)

// String is the use's name.
func (u Use) String() string {
	switch u {
	case UseNo:
		return "no"
	case UseReady:
		return "ready"
	case UseAfterSwitch:
		return "after switch"
	}
	return "Use(invalid)"
}

// slicesNow reports whether the GPU hosts MIG slices in the mode it is in (usable, MIG mode).
// Every reader of MIG occupancy (policy, DRA devices, defragmentation) asks it.
func (g GPU) slicesNow() bool { return g.Usable && g.Mode == ModeMIG }

// SliceUse is how the GPU can host MIG slices: ready in MIG mode; after a switch when it is in
// whole mode, empty (no client holds it) and switchable; otherwise not. A GPU of no known MIG
// model hosts none.
func (g GPU) SliceUse() Use {
	switch {
	case !g.Usable || !g.State.Valid():
		return UseNo
	case g.Mode == ModeMIG:
		return UseReady
	case g.Mode == ModeWhole && g.Switchable && !g.InUse:
		return UseAfterSwitch
	}
	return UseNo
}

// WholeUse is how the GPU can serve one whole-GPU request: ready in whole mode when nothing
// holds it; after a switch when it is in MIG mode with no instance, no client and switchable;
// otherwise not. A whole-mode GPU needs no MIG model.
func (g GPU) WholeUse() Use {
	switch {
	case !g.Usable || g.InUse:
		return UseNo
	case g.Mode == ModeWhole:
		return UseReady
	case g.Mode == ModeMIG && g.Switchable && g.State.Valid() && g.State.IsEmpty():
		return UseAfterSwitch
	}
	return UseNo
}

// WholeOnceEmpty says whether g would serve a whole-GPU request once every holder of it is
// gone, and whether a switch out of MIG mode would come first: WholeUse's rule without the
// occupancy (the question preemption asks, whole_victims.go).
func (g GPU) WholeOnceEmpty() (ok, switches bool) {
	switch {
	case !g.Usable:
		return false, false
	case g.Mode == ModeWhole:
		return true, false
	case g.Mode == ModeMIG && g.Switchable && g.State.Valid():
		return true, true
	}
	return false, false
}

// Link ranks how directly two GPUs of a node are connected; higher is closer. The caller
// derives it from NVML's topology (nvmlDeviceGetTopologyCommonAncestor, NVLink state). Values
// above LinkNVLink count as LinkNVLink.
type Link uint8

const (
	// LinkOther: across NUMA nodes (NVML's SYSTEM level), or unknown.
	LinkOther Link = iota
	// LinkSameNUMA: on one NUMA node, through the host bridge (NVML's NODE and HOSTBRIDGE).
	LinkSameNUMA
	// LinkSamePCIeSwitch: behind one PCIe switch (NVML's MULTIPLE and SINGLE levels).
	LinkSamePCIeSwitch
	// LinkNVLink: connected directly by NVLink (e.g. the bridged pairs of H100 NVL) or
	// NVSwitch.
	LinkNVLink
)

// maxTopologyGPUs is how many GPUs a Topology holds (bit masks of a uint32); GPUs of a node
// beyond it are never chosen for whole-GPU requests.
const maxTopologyGPUs = 32

// Topology is how the GPUs of one node are connected, built once per node (NewTopology) and
// shared by every Score: the whole-GPU choice reads it as bit masks.
type Topology struct {
	n int
	// atLeast[r][a] is the mask of the GPUs linked to GPU a at rank r or closer (r >= 1).
	atLeast [LinkNVLink + 1][maxTopologyGPUs]uint32
	// bit0[a] and bit1[a] are the bit planes of the ranks from GPU a (rank = bit0 + 2·bit1),
	// for sums of ranks in two popcounts.
	bit0, bit1 [maxTopologyGPUs]uint32
}

// NewTopology builds the topology of n GPUs from links, n×n ranks with links[a*n+b] the
// connection between GPUs a and b. A pair ranks as the lower of its two directions; ranks
// above LinkNVLink count as LinkNVLink; the diagonal is ignored.
func NewTopology(n int, links []Link) (*Topology, error) {
	if n < 0 || n > maxTopologyGPUs {
		return nil, fmt.Errorf("topology of %d GPUs: at most %d are supported", n, maxTopologyGPUs)
	}
	if len(links) != n*n {
		return nil, fmt.Errorf("topology of %d GPUs needs %d links, got %d", n, n*n, len(links))
	}
	t := &Topology{n: n}
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			if a == b {
				continue
			}
			l := min(links[a*n+b], links[b*n+a], LinkNVLink)
			for r := Link(1); r <= l; r++ {
				t.atLeast[r][a] |= 1 << b
			}
			t.bit0[a] |= uint32(l&1) << b
			t.bit1[a] |= uint32(l>>1) << b
		}
	}
	return t, nil
}

// Link is the rank between GPUs a and b; LinkOther for a GPU outside the topology or itself.
func (t *Topology) Link(a, b int) Link {
	if t == nil || a < 0 || b < 0 || a >= t.n || b >= t.n {
		return LinkOther
	}
	l := LinkOther
	for r := Link(1); r <= LinkNVLink && t.atLeast[r][a]&(1<<b) != 0; r++ {
		l = r
	}
	return l
}

// topology is the node's Topology when it describes the node's GPUs, else nil (every pair
// LinkOther).
func (n Node) topology() *Topology {
	if n.Topology == nil || n.Topology.n != len(n.GPUs) {
		return nil
	}
	return n.Topology
}

// link is the rank between GPUs a and b of the node.
func (n Node) link(a, b int) Link { return n.topology().Link(a, b) }
