// Package emulated is an in-memory NVML: GPUs of any model internal/mig knows,
// with the real placement rules (geometry from internal/mig's tables) and
// NVML's error codes: an overlapping or over-limit GPU instance fails with
// ERROR_INSUFFICIENT_RESOURCES, destroying a GPU instance that still has a
// compute instance or a compute instance in use fails with ERROR_IN_USE.
// Tests can inject faults, slow calls and crash points on every call (faults.go) and raise
// XIDs (events.go). With a state file the MIG state survives a process restart (as on real
// hardware); deleting the file is a reboot.
package emulated

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// DriverVersion is what the emulated driver reports.
const DriverVersion = "emulated-580.0"

// ParseSpec parses "MODEL:COUNT[,MODEL:COUNT]" (e.g. "H100-80GB:8") into a GPU list.
func ParseSpec(spec string) ([]mig.Model, error) {
	var out []mig.Model
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, count, found := strings.Cut(part, ":")
		n := 1
		if found {
			v, err := strconv.Atoi(count)
			if err != nil || v < 1 || v > 16 {
				return nil, fmt.Errorf("emulated GPUs %q: count must be 1..16", part)
			}
			n = v
		}
		m, err := mig.ParseModel(name)
		if err != nil {
			return nil, fmt.Errorf("emulated GPUs %q: %w", part, err)
		}
		for range n {
			out = append(out, m)
		}
	}
	if len(out) == 0 || len(out) > 16 {
		return nil, fmt.Errorf("emulated GPUs %q: want 1..16 GPUs", spec)
	}
	return out, nil
}

// Options configure an emulated node.
type Options struct {
	// Node seeds the GPU UUIDs (GPUUUID(node, index)).
	Node string
	// GPUs lists the model of each GPU, by index.
	GPUs []mig.Model
	// MIGDisabled lists GPU indexes whose MIG mode is off at first boot: whole GPUs. Every
	// other GPU starts in MIG mode. A state file's modes, once written, win over this.
	MIGDisabled []int
	// StateFile, when set, persists MIG state across instances of the backend.
	StateFile string
	// Latency is added to every MIG create/destroy call.
	Latency time.Duration
	// MIGModeLatency is added to every SetMIGMode call (a mode switch takes seconds).
	MIGModeLatency time.Duration
}

// Backend is an emulated NVML. It is safe for concurrent use.
type Backend struct {
	opts Options

	mu          sync.Mutex
	initialized bool
	gpus        []*gpu
	seq         uint64
	faults      map[string][]Fault
	policy      func(op string) Fault
	crashes     map[string]*crashPoint
	crashed     bool
	inUse       map[string]bool
	calls       map[string]int
	initFail    nvml.Return
	sets        []*eventSet
}

type gpu struct {
	index   int
	uuid    string
	model   mig.Model
	migMode nvml.MIGMode
	// pendingMode is the mode after the next GPU reset (mode.go); migMode when none is pending.
	pendingMode nvml.MIGMode
	// held is a client (DCGM, a monitoring daemon) holding the GPU (mode.go).
	held  bool
	state mig.GPUState
	gis   map[int]*gpuInstance
	// recovery is the recovery action the driver reports (events.go).
	recovery nvml.RecoveryAction
}

type gpuInstance struct {
	id        int
	profile   mig.Profile
	placement mig.Placement
	cis       map[int]*computeInstance
}

type computeInstance struct {
	id      int
	profile int
	slices  int
	uuid    string
}

// New returns an emulated node. With a state file that exists, the MIG
// instances it records are restored (a process restart, not a reboot).
func New(opts Options) (*Backend, error) {
	if len(opts.GPUs) == 0 {
		return nil, errors.New("emulated NVML: no GPUs")
	}
	b := &Backend{opts: opts, faults: map[string][]Fault{}, crashes: map[string]*crashPoint{}, inUse: map[string]bool{}, calls: map[string]int{}}
	disabled := map[int]bool{}
	for _, i := range opts.MIGDisabled {
		disabled[i] = true
	}
	for i, m := range opts.GPUs {
		if !m.Valid() {
			return nil, fmt.Errorf("emulated NVML: GPU %d: invalid model", i)
		}
		g := &gpu{index: i, uuid: GPUUUID(opts.Node, i), model: m, migMode: nvml.MIGEnabled, state: mig.EmptyGPU(m), gis: map[int]*gpuInstance{}}
		if disabled[i] {
			g.migMode = nvml.MIGDisabled
		}
		g.pendingMode = g.migMode
		b.gpus = append(b.gpus, g)
	}
	if opts.StateFile != "" {
		if err := b.load(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// GPUUUID is the emulated UUID of GPU index on node (deterministic, well formed).
func GPUUUID(node string, index int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	return fmt.Sprintf("GPU-%08x-0000-4000-8000-%08x0000", h.Sum32(), uint32(index))
}

func migUUID(gpuUUID string, gi, ci int, seq uint64) string {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%d/%d/%d", gpuUUID, gi, ci, seq)
	v := h.Sum64()
	return fmt.Sprintf("MIG-%08x-%04x-4%03x-8%03x-%012x", uint32(v>>32), uint16(v>>16), uint16(v)&0xfff, seq&0xfff, v&0xffffffffffff)
}

// SetInUse marks a MIG device as used by a process: destroying its compute
// instance fails with ERROR_IN_USE until it is cleared.
func (b *Backend) SetInUse(migUUID string, inUse bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if inUse {
		b.inUse[migUUID] = true
	} else {
		delete(b.inUse, migUUID)
	}
}

// Calls returns how many times op was called (faulted calls included).
func (b *Backend) Calls(op string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[op]
}

// Reboot empties every GPU, as a node reboot does, ends the clients holding GPUs and clears
// the recovery actions the GPUs asked for. MIG mode is kept, a pending mode becoming current
// (a reboot resets every GPU); on Hopper the real driver forgets MIG mode across a reboot,
// which the emulator does not model (docs/design/geometry.md, "MIG mode").
func (b *Backend) Reboot() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, g := range b.gpus {
		g.held = false
		b.resetLocked(g)
	}
	b.inUse = map[string]bool{}
	return b.saveLocked()
}

// Instance is one MIG instance as the emulator holds it (for test assertions).
type Instance struct {
	GPU         int
	Profile     string
	Placement   mig.Placement
	GPUInstance int
	// ComputeInstance is -1 for a GPU instance without a compute instance.
	ComputeInstance int
	MIGUUID         string
}

// Instances lists every GPU instance on every GPU, ordered by GPU then start.
func (b *Backend) Instances() []Instance {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Instance
	for _, g := range b.gpus {
		for _, gi := range g.gis {
			in := Instance{GPU: g.index, Profile: gi.profile.Name, Placement: gi.placement, GPUInstance: gi.id, ComputeInstance: -1}
			for _, ci := range gi.cis {
				in.ComputeInstance, in.MIGUUID = ci.id, ci.uuid
			}
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GPU != out[j].GPU {
			return out[i].GPU < out[j].GPU
		}
		return out[i].Placement.Start < out[j].Placement.Start
	})
	return out
}

// States returns each GPU's occupancy.
func (b *Backend) States() []mig.GPUState {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]mig.GPUState, len(b.gpus))
	for i, g := range b.gpus {
		out[i] = g.state
	}
	return out
}

// CreateInstance creates a GPU instance and (unless bare) its compute
// instance directly, as a user or another tool would: for tests of unknown
// pre-existing instances. It returns the MIG UUID ("" when bare).
func (b *Backend) CreateInstance(gpuIndex int, profile string, start int, bare bool) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if gpuIndex < 0 || gpuIndex >= len(b.gpus) {
		return "", fmt.Errorf("no GPU %d", gpuIndex)
	}
	g := b.gpus[gpuIndex]
	p, err := g.model.Profile(profile)
	if err != nil {
		return "", fmt.Errorf("create instance: %w", err)
	}
	gi, err := b.createGILocked(g, p, mig.Placement{Start: start, Size: p.MemorySlices})
	if err != nil {
		return "", err
	}
	if bare {
		return "", b.saveLocked()
	}
	ci, err := b.createCILocked(g, gi, p.ComputeInstanceProfile)
	if err != nil {
		return "", err
	}
	return ci.uuid, b.saveLocked()
}

// Init implements nvml.Library.
func (b *Backend) Init() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls[OpInit]++
	if b.crashed {
		return b.deadErr(OpInit)
	}
	if b.initFail != nvml.Success {
		return nvml.NewError(OpInit, b.initFail, "injected fault")
	}
	if err := b.fault(OpInit); err != nil {
		return err
	}
	b.initialized = true
	return nil
}

// Shutdown implements nvml.Library.
func (b *Backend) Shutdown() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initialized = false
	return nil
}

// DriverVersion implements nvml.Library.
func (b *Backend) DriverVersion() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(OpDriverVersion); err != nil {
		return "", err
	}
	return DriverVersion, nil
}

// DeviceCount implements nvml.Library.
func (b *Backend) DeviceCount() (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(OpDeviceCount); err != nil {
		return 0, err
	}
	return len(b.gpus), nil
}

// Device implements nvml.Library.
func (b *Backend) Device(index int) (nvml.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(OpDeviceHandle); err != nil {
		return nil, err
	}
	if index < 0 || index >= len(b.gpus) {
		return nil, nvml.NewError(OpDeviceHandle, nvml.ErrorInvalidArgument, fmt.Sprintf("no device %d", index))
	}
	return &device{b: b, index: index}, nil
}

// createGILocked validates and creates a GPU instance (b.mu held).
func (b *Backend) createGILocked(g *gpu, p mig.Profile, pl mig.Placement) (*gpuInstance, error) {
	const op = OpCreateGPUInstance
	if g.migMode != nvml.MIGEnabled {
		return nil, nvml.NewError(op, nvml.ErrorNotSupported, "MIG mode is disabled")
	}
	legal := false
	for _, s := range p.Starts {
		if s == pl.Start && pl.Size == p.MemorySlices {
			legal = true
		}
	}
	if !legal {
		return nil, nvml.NewError(op, nvml.ErrorInvalidArgument, fmt.Sprintf("%s has no placement %s", p.Name, pl))
	}
	next, err := g.state.Take(p, pl)
	if err != nil {
		return nil, nvml.NewError(op, nvml.ErrorInsufficientResource, err.Error())
	}
	id := 1
	for g.gis[id] != nil {
		id++
	}
	gi := &gpuInstance{id: id, profile: p, placement: pl, cis: map[int]*computeInstance{}}
	g.gis[id] = gi
	g.state = next
	return gi, nil
}

// ciSlices maps COMPUTE_INSTANCE_PROFILE_* values to compute slices.
var ciSlices = map[int]int{0: 1, 1: 2, 2: 3, 3: 4, 4: 7}

func (b *Backend) createCILocked(g *gpu, gi *gpuInstance, profile int) (*computeInstance, error) {
	const op = OpCreateComputeInstance
	slices, ok := ciSlices[profile]
	if !ok || slices > gi.profile.ComputeSlices {
		return nil, nvml.NewError(op, nvml.ErrorNotSupported, fmt.Sprintf("compute instance profile %d does not fit %s", profile, gi.profile.Name))
	}
	used := 0
	for _, ci := range gi.cis {
		used += ci.slices
	}
	if used+slices > gi.profile.ComputeSlices {
		return nil, nvml.NewError(op, nvml.ErrorInsufficientResource, "GPU instance has no free compute slices")
	}
	id := 0
	for gi.cis[id] != nil {
		id++
	}
	b.seq++
	ci := &computeInstance{id: id, profile: profile, slices: slices, uuid: migUUID(g.uuid, gi.id, id, b.seq)}
	gi.cis[id] = ci
	return ci, nil
}

// persisted is the state file's content.
type persisted struct {
	Seq  uint64         `json:"seq"`
	GPUs []persistedGPU `json:"gpus"`
}

type persistedGPU struct {
	UUID      string        `json:"uuid"`
	Model     string        `json:"model"`
	Instances []persistedGI `json:"instances"`
	// RecoveryAction is what the driver asks of the GPU after an XID (events.go).
	RecoveryAction nvml.RecoveryAction `json:"recoveryAction,omitempty"`
	// MIGMode and PendingMIGMode are the current and pending MIG modes (mode.go); absent in
	// files written before modes could change, whose GPUs keep the configured mode.
	MIGMode        *nvml.MIGMode `json:"migMode,omitempty"`
	PendingMIGMode *nvml.MIGMode `json:"pendingMigMode,omitempty"`
}

type persistedGI struct {
	ID        int           `json:"id"`
	Profile   string        `json:"profile"`
	Placement mig.Placement `json:"placement"`
	CIs       []persistedCI `json:"computeInstances,omitempty"`
}

type persistedCI struct {
	ID      int    `json:"id"`
	Profile int    `json:"profile"`
	UUID    string `json:"uuid"`
}

func (b *Backend) load() error {
	data, err := os.ReadFile(b.opts.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a fresh boot
	}
	if err != nil {
		return fmt.Errorf("emulated NVML state: %w", err)
	}
	var p persisted
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("emulated NVML state %s: %w", b.opts.StateFile, err)
	}
	if len(p.GPUs) != len(b.gpus) {
		return fmt.Errorf("emulated NVML state %s: has %d GPUs, configured %d (delete the file to reboot)", b.opts.StateFile, len(p.GPUs), len(b.gpus))
	}
	b.seq = p.Seq
	for i, pg := range p.GPUs {
		g := b.gpus[i]
		if pg.UUID != g.uuid || pg.Model != g.model.String() {
			return fmt.Errorf("emulated NVML state %s: GPU %d is %s %s, configured %s %s", b.opts.StateFile, i, pg.Model, pg.UUID, g.model, g.uuid)
		}
		g.recovery = pg.RecoveryAction
		if pg.MIGMode != nil {
			g.migMode, g.pendingMode = *pg.MIGMode, *pg.MIGMode
		}
		if pg.PendingMIGMode != nil {
			g.pendingMode = *pg.PendingMIGMode
		}
		for _, pgi := range pg.Instances {
			prof, err := g.model.Profile(pgi.Profile)
			if err != nil {
				return fmt.Errorf("emulated NVML state: GPU %d: %w", i, err)
			}
			next, err := g.state.Take(prof, pgi.Placement)
			if err != nil {
				return fmt.Errorf("emulated NVML state: GPU %d: %w", i, err)
			}
			g.state = next
			gi := &gpuInstance{id: pgi.ID, profile: prof, placement: pgi.Placement, cis: map[int]*computeInstance{}}
			for _, pci := range pgi.CIs {
				gi.cis[pci.ID] = &computeInstance{id: pci.ID, profile: pci.Profile, slices: ciSlices[pci.Profile], uuid: pci.UUID}
			}
			g.gis[pgi.ID] = gi
		}
	}
	return nil
}

// saveLocked writes the state file atomically (b.mu held); a backend killed at a crash point
// writes nothing any more.
func (b *Backend) saveLocked() error {
	if b.opts.StateFile == "" || b.crashed {
		return nil
	}
	p := persisted{Seq: b.seq}
	for _, g := range b.gpus {
		cur, pending := g.migMode, g.pendingMode
		pg := persistedGPU{UUID: g.uuid, Model: g.model.String(), Instances: []persistedGI{}, RecoveryAction: g.recovery,
			MIGMode: &cur, PendingMIGMode: &pending}
		ids := make([]int, 0, len(g.gis))
		for id := range g.gis {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		for _, id := range ids {
			gi := g.gis[id]
			pgi := persistedGI{ID: gi.id, Profile: gi.profile.Name, Placement: gi.placement}
			for _, ci := range gi.cis {
				pgi.CIs = append(pgi.CIs, persistedCI{ID: ci.id, Profile: ci.profile, UUID: ci.uuid})
			}
			sort.Slice(pgi.CIs, func(i, j int) bool { return pgi.CIs[i].ID < pgi.CIs[j].ID })
			pg.Instances = append(pg.Instances, pgi)
		}
		p.GPUs = append(p.GPUs, pg)
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("emulated NVML state: %w", err)
	}
	dir := filepath.Dir(b.opts.StateFile)
	tmp, err := os.CreateTemp(dir, ".emulated-nvml-*")
	if err != nil {
		return fmt.Errorf("emulated NVML state: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return errors.Join(fmt.Errorf("emulated NVML state: %w", err), tmp.Close(), os.Remove(tmp.Name()))
	}
	if err := tmp.Close(); err != nil {
		return errors.Join(fmt.Errorf("emulated NVML state: %w", err), os.Remove(tmp.Name()))
	}
	if err := os.Rename(tmp.Name(), b.opts.StateFile); err != nil {
		return errors.Join(fmt.Errorf("emulated NVML state: %w", err), os.Remove(tmp.Name()))
	}
	return nil
}
