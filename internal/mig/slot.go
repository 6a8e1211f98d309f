package mig

import "fmt"

// Slot is where a slice is, or is to be: a GPU (by UUID), a profile (NVIDIA spelling) and a
// placement on that GPU. The scheduler's snapshot and the agent's plan both speak of slices
// this way; internal/mig/migapi converts it from and to a SliceAllocation's spec.
type Slot struct {
	GPU       string
	Profile   string
	Placement Placement
}

// WholeSlot is the slot of GPU uuid held whole (MIG mode off): no profile, no placement.
func WholeSlot(uuid string) Slot { return Slot{GPU: uuid} }

// Whole reports whether the slot is a whole GPU (WholeSlot) rather than a MIG slice.
func (s Slot) Whole() bool { return s.Profile == "" }

// String is "GPU-x 1g.10gb.me@3" (the profile in Kubernetes spelling), "GPU-x whole" for a
// whole GPU.
func (s Slot) String() string {
	if s.Whole() {
		return s.GPU + " whole"
	}
	return fmt.Sprintf("%s %s@%d", s.GPU, LegalProfileName(s.Profile), s.Placement.Start)
}

// Overlaps reports whether two slots share memory slices of one GPU; a whole GPU overlaps
// every slot of its GPU.
func (s Slot) Overlaps(o Slot) bool {
	if s.GPU != o.GPU {
		return false
	}
	return s.Whole() || o.Whole() || (s.Placement.Start < o.Placement.Start+o.Placement.Size &&
		o.Placement.Start < s.Placement.Start+s.Placement.Size)
}

// DeviceID names the slot to the kubelet and in CDI: "<GPU UUID>_<profile>_<start>", the
// profile in Kubernetes spelling (a valid CDI device name for the GPU UUIDs NVML gives). It
// names the placement, not the instance: an instance recreated at the slot (after a node
// reboot) gets a new MIG UUID but keeps its device ID, which is what the kubelet's
// checkpoint remembers for the pod (docs/design/invariants.md, I14).
//
// A whole GPU's device ID is its UUID, as NVIDIA's device plugin names whole GPUs.
func (s Slot) DeviceID() string {
	if s.Whole() {
		return s.GPU
	}
	return fmt.Sprintf("%s_%s_%d", s.GPU, LegalProfileName(s.Profile), s.Placement.Start)
}
