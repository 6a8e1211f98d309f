package mig

import (
	"strconv"
	"strings"
)

// profileOption is a profile's media and graphics option: data of the table, spelled after the
// size in the profile's name the way NVIDIA spells it ("1g.24gb+me.all").
type profileOption uint8

const (
	optNone profileOption = iota
	// optMedia ("+me"): the GPU's one set of media extensions (NVDEC, NVJPG, OFA).
	optMedia
	// optAllMedia ("+me.all"): every media engine of the GPU.
	optAllMedia
	// optNoMedia ("-me"): no media engine at all.
	optNoMedia
	// optGraphics ("+gfx"): graphics APIs in the instance (GB20x GPUs).
	optGraphics
	numOptions
)

// optionSpelling is each option's suffix: NVIDIA's, and the one Kubernetes allows in resource
// names and CRD enums ('+' is not legal there; '.' and '-' are).
var optionSpelling = [numOptions]struct{ nvidia, legal string }{
	optNone:     {"", ""},
	optMedia:    {"+me", ".me"},
	optAllMedia: {"+me.all", ".me.all"},
	optNoMedia:  {"-me", "-me"},
	optGraphics: {"+gfx", ".gfx"},
}

// exclusiveMedia reports whether an instance of the option holds media engines no other such
// instance can share: at most one per GPU.
func (o profileOption) exclusiveMedia() bool { return o == optMedia || o == optAllMedia }

// String is NVIDIA's suffix ("" for none).
func (o profileOption) String() string {
	if o < numOptions {
		return optionSpelling[o].nvidia
	}
	return "?"
}

// parseProfileName parses "<c>g.<m>gb" followed by an option in either spelling.
func parseProfileName(name string) (compute, memGB int, opt profileOption, ok bool) {
	c, rest, found := strings.Cut(name, "g.")
	i := strings.Index(rest, "gb")
	if !found || i < 0 {
		return 0, 0, 0, false
	}
	ci, err1 := strconv.Atoi(c)
	mi, err2 := strconv.Atoi(rest[:i])
	if err1 != nil || err2 != nil || ci <= 0 || mi <= 0 {
		return 0, 0, 0, false
	}
	suffix := rest[i+len("gb"):]
	for o := optNone; o < numOptions; o++ {
		if suffix == optionSpelling[o].nvidia || suffix == optionSpelling[o].legal {
			return ci, mi, o, true
		}
	}
	return 0, 0, 0, false
}

// spellProfile writes a profile name in NVIDIA's spelling.
func spellProfile(compute, memGB int, opt profileOption) string {
	return strconv.Itoa(compute) + "g." + strconv.Itoa(memGB) + "gb" + optionSpelling[opt].nvidia
}

// driverBranch is the branch of an NVIDIA driver version ("525.85.12" -> 525): the first run of
// digits, so that the emulated driver's "emulated-580.0" is 580. Zero when there is none.
func driverBranch(version string) int {
	start := strings.IndexAny(version, "0123456789")
	if start < 0 {
		return 0
	}
	end := start
	for end < len(version) && version[end] >= '0' && version[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(version[start:end])
	if err != nil {
		return 0
	}
	return n
}

// SupportedBy reports whether a driver of that version (nvmlSystemGetDriverVersion, e.g.
// "525.85.12") has the profile: its branch is at least MinDriver. A version with no branch in
// it is taken to have every profile (NVML then answers for itself).
func (p Profile) SupportedBy(driverVersion string) bool {
	b := driverBranch(driverVersion)
	return p.MinDriver == 0 || b == 0 || b >= p.MinDriver
}
