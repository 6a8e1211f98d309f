package migdra

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/slicer-operator/slicer/internal/mig"
)

// DeviceRef is a MIG device name read back: the GPU index, the profile as spelled in the
// name (dots as dashes) and the placement start. Resolve turns it into geometry once the
// GPU's model is known.
type DeviceRef struct {
	GPU          int
	ProfileToken string
	Start        int
}

// profileToken is how DeviceName spells a profile.
func profileToken(p mig.Profile) string { return tokenOf(p.LegalName()) }

// tokenOf spells a profile name in Kubernetes spelling as device names do (dots as dashes).
func tokenOf(legal string) string { return strings.ReplaceAll(legal, ".", "-") }

// ProfileName is the profile (NVIDIA spelling) the reference names, found among the profiles
// of every model: for a reader that does not know the GPU's model (Resolve needs it).
func (r DeviceRef) ProfileName() (string, bool) {
	for _, legal := range mig.KnownProfileNames() {
		if tokenOf(legal) == r.ProfileToken {
			name, err := mig.ParseProfileName(legal)
			return name, err == nil
		}
	}
	return "", false
}

// DeviceGPU is the GPU index of a device of this driver, a MIG device (DeviceName) or a whole
// GPU (WholeGPUDeviceName).
func DeviceGPU(name string) (int, error) {
	if i, ok := ParseWholeDeviceName(name); ok {
		return i, nil
	}
	ref, err := ParseDeviceName(name)
	return ref.GPU, err
}

// ParseWholeDeviceName reads a name WholeGPUDeviceName made ("gpu-<i>"): the GPU index, or
// false for any other name.
func ParseWholeDeviceName(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "gpu-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == rest
}

// ParseDeviceName reads a name DeviceName made ("gpu-<i>-<profile>-at-<start>"). A whole-GPU
// device name (WholeGPUDeviceName) is not a MIG device and is refused.
func ParseDeviceName(name string) (DeviceRef, error) {
	rest, ok := strings.CutPrefix(name, "gpu-")
	if !ok {
		return DeviceRef{}, fmt.Errorf("device %q: no gpu- prefix", name)
	}
	idx, rest, ok := strings.Cut(rest, "-")
	if !ok {
		return DeviceRef{}, fmt.Errorf("device %q: not a MIG device", name)
	}
	at := strings.LastIndex(rest, "-at-")
	if at <= 0 {
		return DeviceRef{}, fmt.Errorf("device %q: no placement", name)
	}
	gpu, err := strconv.Atoi(idx)
	if err != nil || gpu < 0 || strconv.Itoa(gpu) != idx {
		return DeviceRef{}, fmt.Errorf("device %q: GPU index %q", name, idx)
	}
	startS := rest[at+len("-at-"):]
	start, err := strconv.Atoi(startS)
	if err != nil || start < 0 || strconv.Itoa(start) != startS {
		return DeviceRef{}, fmt.Errorf("device %q: placement start %q", name, startS)
	}
	return DeviceRef{GPU: gpu, ProfileToken: rest[:at], Start: start}, nil
}

// Resolve finds the profile and the legal placement the reference names on a GPU of model m.
func (r DeviceRef) Resolve(m mig.Model) (mig.Profile, mig.Placement, error) {
	for _, p := range m.Profiles() {
		if profileToken(p) != r.ProfileToken {
			continue
		}
		for _, pl := range p.Placements() {
			if pl.Start == r.Start {
				return p, pl, nil
			}
		}
		return mig.Profile{}, mig.Placement{}, fmt.Errorf("profile %s has no placement at %d on %s", p.Name, r.Start, m)
	}
	return mig.Profile{}, mig.Placement{}, fmt.Errorf("no profile %q on %s", r.ProfileToken, m)
}
