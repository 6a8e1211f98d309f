package mig

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

// maxTopologyGPUs is how many GPUs of a node the whole-GPU search considers (bit masks of a
// uint32); GPUs beyond it are never chosen for whole-GPU requests.
const maxTopologyGPUs = 32

// link is the rank between GPUs a and b of the node: Node.Links[a*len(GPUs)+b], the lower of
// the two directions; LinkOther when Links is not len(GPUs)² long.
func (n Node) link(a, b int) Link {
	k := len(n.GPUs)
	if len(n.Links) != k*k || a == b {
		return LinkOther
	}
	l := min(n.Links[a*k+b], n.Links[b*k+a])
	return min(l, LinkNVLink)
}
