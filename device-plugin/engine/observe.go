package engine

import (
	"errors"
	"fmt"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Slice is a MIG instance observed on the node.
type Slice struct {
	mig.Slot
	GI int
	// CI is -1 for a GPU instance without a compute instance.
	CI      int
	MIGUUID string
	// Unhealthy says why the instance is unhealthy (an XID in it, Health.Apply); "" when
	// healthy.
	Unhealthy string
}

// Complete reports whether the slice has a compute instance and a MIG device.
func (s Slice) Complete() bool { return s.CI >= 0 && s.MIGUUID != "" }

// Key names the slice across observations: its MIG device UUID, or for a GPU instance
// without one its slot and GPU instance id. The orphan clock and the NodeAccelerator view
// are keyed by it.
func (s Slice) Key() string {
	if s.MIGUUID != "" {
		return s.MIGUUID
	}
	return fmt.Sprintf("%s/gi%d", s.Slot, s.GI)
}

// GPU is one observed physical GPU.
type GPU struct {
	Index       int
	UUID        string
	ProductName string
	MemoryMiB   uint64
	// Model is zero when the GPU is not a MIG model Slicer knows; Unrecognized then says why.
	Model        mig.Model
	Unrecognized *mig.RecognitionError
	// MIGMode is the current MIG mode as NVML reports it.
	MIGMode nvml.MIGMode
	// MIGModePending: NVML reports a pending MIG mode other than MIGMode, a change that has
	// not taken effect yet (PendingMIGMode). False, the zero value, when none is pending.
	MIGModePending bool
	// MIGSupported is false when NVML reports MIG as not supported, and when the
	// observation failed before the MIG mode was read (Err says why).
	MIGSupported bool
	Healthy      bool
	// Recovery is the recovery action the driver asks of the GPU (RecoveryNone on a driver
	// that cannot say).
	Recovery nvml.RecoveryAction
	Slices   []Slice
	// Err is set when the GPU could not be fully observed: its slices are not known.
	Err error
	// why says why a GPU observed in full is unhealthy (Health.Apply).
	why string

	dev nvml.Device
	gis map[int]nvml.ObservedGI
	// reset resets the GPU (nil: the backend cannot, nvml.GPUResetter).
	reset func() error
}

// CanReset reports whether the agent can reset g itself (its backend is an nvml.GPUResetter).
func (g *GPU) CanReset() bool { return g.reset != nil }

// MIGReady reports whether MIG slices can be laid out on g: it is of a model Slicer knows
// and in MIG mode. Only such a GPU has observed slices (Observe lists none elsewhere), free
// room, metrics and devices in a pool. Health is not part of it: Unusable adds it.
func (g *GPU) MIGReady() bool { return g.Model.Valid() && g.MIGMode == nvml.MIGEnabled }

// PendingMIGMode is the MIG mode g has once its pending change takes effect: MIGMode when
// none is pending, the other mode when one is.
func (g *GPU) PendingMIGMode() nvml.MIGMode {
	switch {
	case !g.MIGModePending:
		return g.MIGMode
	case g.MIGMode == nvml.MIGEnabled:
		return nvml.MIGDisabled
	}
	return nvml.MIGEnabled
}

// AppendOccupants appends to dst the occupants of g's observed slices, holding no one (the
// input of mig.Occupancy, beside the claims a frontend lists).
func (g *GPU) AppendOccupants(dst []mig.Occupant) []mig.Occupant {
	for _, s := range g.Slices {
		dst = append(dst, mig.Occupant{Instance: mig.Instance{Profile: s.Profile, Placement: s.Placement}})
	}
	return dst
}

// Unusable says why g (nil: not on the node) cannot serve MIG devices now, "" when it can:
// it is unhealthy, or not MIGReady.
func (g *GPU) Unusable() string {
	switch why := g.UnusableWhole(); {
	case why != "":
		return why
	case !g.Model.Valid():
		return fmt.Sprintf("GPU %d (%s) is not a MIG model Slicer knows", g.Index, g.ProductName)
	case g.MIGMode != nvml.MIGEnabled:
		return fmt.Sprintf("GPU %d is not in MIG mode", g.Index)
	}
	return ""
}

// UnusableWhole says why g (nil: not on the node) cannot serve as a whole GPU now, "" when it
// can: it is unhealthy. Its MIG mode is the caller's to check (a whole GPU needs it off).
func (g *GPU) UnusableWhole() string {
	switch {
	case g == nil:
		return "no such GPU"
	case !g.Healthy && g.Err != nil:
		return fmt.Sprintf("GPU %d is unhealthy: %v", g.Index, g.Err)
	case !g.Healthy && g.why == "":
		return fmt.Sprintf("GPU %d is unhealthy", g.Index)
	case !g.Healthy:
		return fmt.Sprintf("GPU %d is unhealthy: %s", g.Index, g.why)
	}
	return ""
}

// markUnhealthy makes a GPU unhealthy for why (the first reason stays).
func (g *GPU) markUnhealthy(why string) {
	if g.Healthy {
		g.Healthy, g.why = false, why
	} else if g.Err == nil && g.why == "" {
		g.why = why
	}
}

// Observation is the node's NVML state.
type Observation struct {
	DriverVersion string
	GPUs          []*GPU
}

// GPUByUUID is the observed GPU with that UUID, nil if none.
func (o *Observation) GPUByUUID(uuid string) *GPU {
	for _, g := range o.GPUs {
		if g.UUID == uuid {
			return g
		}
	}
	return nil
}

// Slices lists every observed slice, GPU by GPU.
func (o *Observation) Slices() []Slice {
	var out []Slice
	for _, g := range o.GPUs {
		out = append(out, g.Slices...)
	}
	return out
}

// profiles returns the GPU- and compute-instance profile enums of a model.
func profiles(m mig.Model) (gi, ci []int) {
	seen := map[int]bool{}
	for _, p := range m.Profiles() {
		gi = append(gi, p.NVMLProfile)
		if !seen[p.ComputeInstanceProfile] {
			seen[p.ComputeInstanceProfile] = true
			ci = append(ci, p.ComputeInstanceProfile)
		}
	}
	return gi, ci
}

func profileByEnum(m mig.Model, enum int) (mig.Profile, bool) {
	for _, p := range m.Profiles() {
		if p.NVMLProfile == enum {
			return p, true
		}
	}
	return mig.Profile{}, false
}

// Observe reads every GPU of an initialised lib: identity, MIG mode, then GPU instances
// first and compute instances second (nvml.ListInstances). NVML errors are counted in m.
func Observe(lib nvml.Library, m *Metrics) (*Observation, error) {
	ver, err := lib.DriverVersion()
	if err != nil {
		m.NVMLError(err)
		return nil, fmt.Errorf("driver version: %w", err)
	}
	n, err := lib.DeviceCount()
	if err != nil {
		m.NVMLError(err)
		return nil, fmt.Errorf("device count: %w", err)
	}
	o := &Observation{DriverVersion: ver}
	for i := 0; i < n; i++ {
		g, err := observeGPU(lib, i)
		if err != nil {
			m.NVMLError(err)
			return nil, err
		}
		if g.Err != nil {
			m.NVMLError(g.Err)
		}
		o.GPUs = append(o.GPUs, g)
	}
	return o, nil
}

func observeGPU(lib nvml.Library, i int) (*GPU, error) {
	dev, err := lib.Device(i)
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", i, err)
	}
	g := &GPU{Index: i, dev: dev, Healthy: true, gis: map[int]nvml.ObservedGI{}}
	if r, ok := lib.(nvml.GPUResetter); ok {
		g.reset = func() error { return r.ResetGPU(i) }
	}
	if g.UUID, err = dev.UUID(); err != nil {
		return nil, fmt.Errorf("device %d uuid: %w", i, err)
	}
	// Identity details are best effort; a failure marks the GPU unhealthy.
	name, errName := dev.Name()
	mem, errMem := dev.MemoryMiB()
	pci, errPCI := dev.PCIDeviceID()
	g.ProductName, g.MemoryMiB = name, mem
	if errName != nil || errMem != nil || errPCI != nil {
		g.Healthy = false
		g.Err = fmt.Errorf("device %d identity: name %w, memory %w, pci %w", i, errName, errMem, errPCI)
		return g, nil
	}
	if m, err := mig.ModelForDevice(pci, name, mem); err == nil {
		g.Model = m
	} else {
		errors.As(err, &g.Unrecognized)
	}
	switch ra, err := dev.RecoveryAction(); {
	case nvml.ReturnOf(err) == nvml.ErrorNotSupported:
	case err != nil:
		g.Healthy, g.Err = false, fmt.Errorf("device %d recovery action: %w", i, err)
		return g, nil
	default:
		g.Recovery = ra
	}
	cur, pending, err := dev.MIGMode()
	switch {
	case nvml.ReturnOf(err) == nvml.ErrorNotSupported:
		return g, nil
	case err != nil:
		g.Healthy, g.Err = false, fmt.Errorf("device %d MIG mode: %w", i, err)
		return g, nil
	}
	g.MIGSupported, g.MIGMode, g.MIGModePending = true, cur, pending != cur
	if !g.MIGReady() {
		return g, nil
	}
	giP, ciP := profiles(g.Model)
	gis, err := nvml.ListInstances(dev, giP, ciP)
	if err != nil {
		g.Healthy, g.Err = false, fmt.Errorf("device %d instances: %w", i, err)
		return g, nil
	}
	for _, gi := range gis {
		p, ok := profileByEnum(g.Model, gi.Profile)
		if !ok {
			continue
		}
		s := Slice{Slot: mig.Slot{GPU: g.UUID, Profile: p.Name, Placement: mig.Placement{Start: gi.Placement.Start, Size: gi.Placement.Size}}, GI: gi.ID, CI: -1}
		if len(gi.CIs) > 0 {
			s.CI, s.MIGUUID = gi.CIs[0].ID, gi.CIs[0].MIGUUID
		}
		g.Slices = append(g.Slices, s)
		g.gis[gi.ID] = gi
	}
	return g, nil
}
