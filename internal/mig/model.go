package mig

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

const (
	// ResourcePrefix is the prefix of Slicer's extended resources (slicer.dev/mig-1g.10gb).
	ResourcePrefix = "slicer.dev/mig-"
	// NVIDIAResourcePrefix is the prefix of the NVIDIA device plugin's MIG resources, which the
	// webhook rewrites to ResourcePrefix.
	NVIDIAResourcePrefix = "nvidia.com/mig-"
)

// Profile is one GPU-instance profile of one model. Values are copies of the model table;
// Starts is shared with the table and must not be modified.
type Profile struct {
	Model Model
	// Name is the NVIDIA spelling, e.g. "1g.10gb+me". Use LegalName or ResourceName for
	// Kubernetes.
	Name string
	// Option is the media or graphics option NVIDIA spells after the size: "" (none), "+me",
	// "+me.all", "-me" or "+gfx".
	Option string
	// NVMLProfile is the GPU_INSTANCE_PROFILE_* enum value.
	NVMLProfile int
	// SMIProfileID is the profile id nvidia-smi prints.
	SMIProfileID int
	// ComputeInstanceProfile is the COMPUTE_INSTANCE_PROFILE_* value of the compute instance
	// to create inside the GPU instance (the full one).
	ComputeInstanceProfile int
	ComputeSlices          int
	// MemorySlices is also the size of every placement of this profile.
	MemorySlices int
	MaxCount     int
	// Starts are the legal placement starts, in memory slices, in NVML order.
	Starts []int
	// MediaExtensions is true for the +me and +me.all profiles: they hold media engines no
	// other such instance shares, so at most one exists per GPU.
	MediaExtensions bool
	// MemoryGB is the nominal memory in the profile name.
	MemoryGB int
	// MinDriver is the first NVIDIA driver branch that has the profile (525 for "only available
	// starting with R525 drivers"); 0 when every driver with MIG on the model has it. See
	// SupportedBy.
	MinDriver int

	index int8
}

// LegalName is the profile name spelled as Kubernetes allows it ("1g.10gb.me").
func (p Profile) LegalName() string { return LegalProfileName(p.Name) }

// ResourceName is Slicer's extended resource name, e.g. "slicer.dev/mig-1g.10gb.me".
func (p Profile) ResourceName() string { return ResourcePrefix + p.LegalName() }

// NVIDIAResourceName is the NVIDIA device plugin's resource name, e.g. "nvidia.com/mig-1g.10gb.me".
func (p Profile) NVIDIAResourceName() string { return NVIDIAResourcePrefix + p.LegalName() }

// Placements lists every legal placement of the profile on an empty GPU, in NVML order.
func (p Profile) Placements() []Placement {
	out := make([]Placement, len(p.Starts))
	for i, s := range p.Starts {
		out[i] = Placement{Start: s, Size: p.MemorySlices}
	}
	return out
}

// Placement is where a GPU instance lives, in memory slices.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

func (pl Placement) String() string { return fmt.Sprintf("{start %d, size %d}", pl.Start, pl.Size) }

// Models lists every known model in a stable order.
func Models() []Model {
	out := make([]Model, 0, numModels)
	for m := Model(1); m <= numModels; m++ {
		out = append(out, m)
	}
	return out
}

func (m Model) spec() *modelSpec {
	if m == 0 || m > numModels {
		return nil
	}
	return modelTables[m]
}

// Valid reports whether m is a known model.
func (m Model) Valid() bool { return m.spec() != nil }

// String is the model name, e.g. "H100-80GB".
func (m Model) String() string {
	if s := m.spec(); s != nil {
		return s.name
	}
	return "Model(" + strconv.Itoa(int(m)) + ")"
}

// ComputeSlices is the number of compute slices of a whole GPU (7, or 4 on A30).
func (m Model) ComputeSlices() int {
	if s := m.spec(); s != nil {
		return s.computeSlices
	}
	return 0
}

// MemorySlices is the number of memory slices of a whole GPU (8, or 4 on A30).
func (m Model) MemorySlices() int {
	if s := m.spec(); s != nil {
		return s.memorySlices
	}
	return 0
}

// MemoryMiB is the nominal total memory NVML reports for the model (approximate).
func (m Model) MemoryMiB() uint64 {
	if s := m.spec(); s != nil {
		return s.memoryMiB
	}
	return 0
}

// PCIDeviceIDs lists the model's PCI device ids (vendor 0x10DE).
func (m Model) PCIDeviceIDs() []uint16 {
	if s := m.spec(); s != nil {
		return append([]uint16(nil), s.pciDeviceIDs...)
	}
	return nil
}

// ProductNames lists the names NVIDIA's driver gives the model's parts (nvmlDeviceGetName).
func (m Model) ProductNames() []string {
	if s := m.spec(); s != nil {
		return append([]string(nil), s.productNames...)
	}
	return nil
}

// Profiles lists the model's GPU-instance profiles in table order.
func (m Model) Profiles() []Profile {
	t := tableFor(m)
	if t == nil {
		return nil
	}
	return append([]Profile(nil), t.profiles...)
}

// Profile finds a profile of the model by name, in either spelling ("1g.10gb+me" or
// "1g.10gb.me").
func (m Model) Profile(name string) (Profile, error) {
	t := tableFor(m)
	if t == nil {
		return Profile{}, fmt.Errorf("unknown GPU model %d", int(m))
	}
	canon := canonicalProfileName(name)
	for _, p := range t.profiles {
		if p.Name == canon {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("profile %q is not a MIG profile of %s (it has %s)", name, m, strings.Join(m.profileNames(), ", "))
}

func (m Model) profileNames() []string {
	var out []string
	for _, p := range m.spec().profiles {
		out = append(out, LegalProfileName(p.name))
	}
	return out
}

// ParseModel finds a model by its name ("H100-80GB"), case-insensitively.
func ParseModel(name string) (Model, error) {
	for m := Model(1); m <= numModels; m++ {
		if strings.EqualFold(modelTables[m].name, name) {
			return m, nil
		}
	}
	var names []string
	for m := Model(1); m <= numModels; m++ {
		names = append(names, modelTables[m].name)
	}
	return 0, fmt.Errorf("unknown GPU model %q (known: %s)", name, strings.Join(names, ", "))
}

// LegalProfileName spells a profile name the way Kubernetes allows: the '+' of an option
// becomes '.' ("1g.10gb+me" -> "1g.10gb.me", "1g.24gb+me.all" -> "1g.24gb.me.all"; "-me" stays).
// A name that is no profile name is returned as it is.
func LegalProfileName(name string) string { return respell(name, true) }

// canonicalProfileName is the NVIDIA spelling of a profile name in either spelling.
func canonicalProfileName(name string) string { return respell(name, false) }

// respell rewrites the option suffix of a profile name into one spelling. It allocates only
// when the suffix changes: Occupancy resolves profile names on the scheduler's hot path.
func respell(name string, legal bool) string {
	if _, _, opt, ok := parseProfileName(name); ok && opt != optNone {
		from, to := optionSpelling[opt].nvidia, optionSpelling[opt].legal
		if !legal {
			from, to = to, from
		}
		if strings.HasSuffix(name, from) && from != to {
			return strings.TrimSuffix(name, from) + to
		}
	}
	return name
}

// ResourceName is Slicer's extended resource name for a profile name in either spelling.
func ResourceName(profileName string) string {
	return ResourcePrefix + LegalProfileName(profileName)
}

// NVIDIAResourceName is the NVIDIA resource name for a profile name in either spelling
// (nvidia.com/mig-1g.10gb.me): what pods ask for in DRA mode.
func NVIDIAResourceName(profileName string) string {
	return NVIDIAResourcePrefix + LegalProfileName(profileName)
}

// ProfileNameFromResource returns the profile name (NVIDIA spelling) of a Slicer or NVIDIA MIG
// resource name, and whether the resource is one.
func ProfileNameFromResource(resource string) (string, bool) {
	var rest string
	switch {
	case strings.HasPrefix(resource, ResourcePrefix):
		rest = strings.TrimPrefix(resource, ResourcePrefix)
	case strings.HasPrefix(resource, NVIDIAResourcePrefix):
		rest = strings.TrimPrefix(resource, NVIDIAResourcePrefix)
	default:
		return "", false
	}
	name, err := ParseProfileName(rest)
	if err != nil {
		return "", false
	}
	return name, true
}

// ParseProfileName accepts a profile name in either spelling ("1g.10gb+me" or "1g.10gb.me")
// and returns the NVIDIA spelling, or an error when no known model has such a profile.
func ParseProfileName(name string) (string, error) {
	canon := canonicalProfileName(strings.TrimSpace(name))
	if _, _, _, ok := parseProfileName(canon); !ok {
		return "", fmt.Errorf("%q is not a MIG profile name (want <N>g.<M>gb, then .me, .me.all, -me, .gfx or nothing; known: %s)",
			name, strings.Join(KnownProfileNames(), ", "))
	}
	if len(ModelsSupporting(canon)) == 0 {
		return "", fmt.Errorf("no supported GPU model has MIG profile %q (known: %s)", name, strings.Join(KnownProfileNames(), ", "))
	}
	return canon, nil
}

// splitProfileName parses "<c>g.<m>gb[option]"; media is true for the options whose media
// engines no other instance shares (+me, +me.all).
func splitProfileName(name string) (compute, memGB int, media, ok bool) {
	c, m, opt, ok := parseProfileName(name)
	return c, m, opt.exclusiveMedia(), ok
}

// KnownProfileNames lists every profile name of every model, in the Kubernetes spelling
// (".me"), deduplicated and sorted by compute slices, memory, then media extensions.
func KnownProfileNames() []string {
	seen := map[string]bool{}
	var out []string
	for m := Model(1); m <= numModels; m++ {
		for _, p := range modelTables[m].profiles {
			if !seen[p.name] {
				seen[p.name] = true
				out = append(out, p.name)
			}
		}
	}
	sortProfileNames(out)
	for i, n := range out {
		out[i] = LegalProfileName(n)
	}
	return out
}

// sortProfileNames sorts NVIDIA-spelled names ascending by compute slices, memory, option
// (none, +me, +me.all, -me, +gfx), then name (a stable, human order).
func sortProfileNames(names []string) {
	sort.Slice(names, func(i, j int) bool {
		ci, mi, oi, _ := parseProfileName(names[i])
		cj, mj, oj, _ := parseProfileName(names[j])
		if ci != cj {
			return ci < cj
		}
		if mi != mj {
			return mi < mj
		}
		if oi != oj {
			return oi < oj
		}
		return names[i] < names[j]
	})
}

// ModelsSupporting lists the models that have a profile of that name (either spelling).
func ModelsSupporting(profileName string) []Model {
	canon := canonicalProfileName(profileName)
	var out []Model
	for m := Model(1); m <= numModels; m++ {
		for _, p := range modelTables[m].profiles {
			if p.name == canon {
				out = append(out, m)
				break
			}
		}
	}
	return out
}
