package mig

// Right-sizing: which smaller profile of the same model a slice's peak memory use fits. The
// memory of a profile here is its nominal size, the GB in its name taken as 10^9 bytes; the
// instance the driver creates has at least that much, so a fit by this measure is a fit on
// the device.

// MemoryBytes is the profile's nominal memory in bytes (MemoryGB × 10^9).
func (p Profile) MemoryBytes() uint64 { return uint64(p.MemoryGB) * 1_000_000_000 }

// StepDown is the next profile below p in memory on p's model: among the profiles with the
// largest nominal memory still below p's, the one with the most compute slices, and of those
// the one without media extensions. ok is false when no profile has less memory than p.
func (p Profile) StepDown() (Profile, bool) {
	var best Profile
	found := false
	for _, q := range p.Model.Profiles() {
		if q.MemoryGB >= p.MemoryGB {
			continue
		}
		if !found || better(q, best) {
			best, found = q, true
		}
	}
	return best, found
}

// better orders step-down candidates: more memory, then more compute, then no media extensions.
func better(q, best Profile) bool {
	switch {
	case q.MemoryGB != best.MemoryGB:
		return q.MemoryGB > best.MemoryGB
	case q.ComputeSlices != best.ComputeSlices:
		return q.ComputeSlices > best.ComputeSlices
	default:
		return !q.MediaExtensions && best.MediaExtensions
	}
}

// SmallestFit is the profile of p's model with the least nominal memory that is still below
// p's and holds peakBytes; among equals the one with the most compute slices, then without
// media extensions. ok is false when no smaller profile holds peakBytes.
func (p Profile) SmallestFit(peakBytes uint64) (Profile, bool) {
	var best Profile
	found := false
	for _, q := range p.Model.Profiles() {
		if q.MemoryGB >= p.MemoryGB || q.MemoryBytes() < peakBytes {
			continue
		}
		if !found || q.MemoryGB < best.MemoryGB || (q.MemoryGB == best.MemoryGB && better(q, best)) {
			best, found = q, true
		}
	}
	return best, found
}
