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

// String is "GPU-x 1g.10gb.me@3" (the profile in Kubernetes spelling).
func (s Slot) String() string {
	return fmt.Sprintf("%s %s@%d", s.GPU, LegalProfileName(s.Profile), s.Placement.Start)
}

// Overlaps reports whether two slots share memory slices of one GPU.
func (s Slot) Overlaps(o Slot) bool {
	return s.GPU == o.GPU && s.Placement.Start < o.Placement.Start+o.Placement.Size &&
		o.Placement.Start < s.Placement.Start+s.Placement.Size
}
