package main

import (
	"fmt"
	"slices"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Report is what NVML says about the machine: everything internal/mig's tables depend on. The
// probe only reads.
type Report struct {
	DriverVersion string   `json:"driverVersion"`
	Devices       []Device `json:"devices"`
}

// Device is one GPU.
type Device struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	ProductName string `json:"productName"`
	MemoryMiB   uint64 `json:"memoryMiB"`
	// PCIDeviceID is NVML's pciDeviceId (device << 16 | vendor), e.g. "0x233010de".
	PCIDeviceID string `json:"pciDeviceId"`
	// Model is internal/mig's model for the device ("" when none matches; Recognition says why).
	Model       string `json:"model"`
	Recognition string `json:"recognition,omitempty"`
	MIGCapable  bool   `json:"migCapable"`
	MIGMode     string `json:"migMode,omitempty"`
	MIGPending  string `json:"migModePending,omitempty"`
	// Profiles are reported only when MIG mode is on.
	Profiles []Profile `json:"profiles,omitempty"`
	// Instances are the existing GPU instances (MIG mode on).
	Instances []Instance `json:"instances,omitempty"`
	// TableDiffs lists where NVML and internal/mig's table disagree.
	TableDiffs []string `json:"tableDiffs,omitempty"`
	Errors     []string `json:"errors,omitempty"`
}

// Profile is one GPU-instance profile as NVML reports it.
type Profile struct {
	NVMLProfile   int              `json:"nvmlProfile"`
	ID            int              `json:"id"`
	TableName     string           `json:"tableName,omitempty"`
	SliceCount    int              `json:"sliceCount"`
	InstanceCount int              `json:"instanceCount"`
	MemorySizeMB  uint64           `json:"memorySizeMB"`
	CopyEngines   int              `json:"copyEngines"`
	Decoders      int              `json:"decoders"`
	Encoders      int              `json:"encoders"`
	JPEG          int              `json:"jpeg"`
	OFA           int              `json:"ofa"`
	Placements    []nvml.Placement `json:"placements"`
}

// Instance is an existing GPU instance.
type Instance struct {
	GPUInstanceID int            `json:"gpuInstanceId"`
	NVMLProfile   int            `json:"nvmlProfile"`
	Placement     nvml.Placement `json:"placement"`
	MIGDevices    []string       `json:"migDevices,omitempty"`
}

// nvmlProfiles and ciProfiles are every GPU_INSTANCE_PROFILE_* and COMPUTE_INSTANCE_PROFILE_*
// value go-nvml knows (pkg/nvml/const.go): the probe asks about all of them, not only those of
// the tables.
var nvmlProfiles, ciProfiles = upTo(gonvml.GPU_INSTANCE_PROFILE_COUNT), upTo(gonvml.COMPUTE_INSTANCE_PROFILE_COUNT)

func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func modeName(m nvml.MIGMode) string {
	if m == nvml.MIGEnabled {
		return "Enabled"
	}
	return "Disabled"
}

// probe reads lib (already initialised) without changing anything.
func probe(lib nvml.Library) (Report, error) {
	var r Report
	var err error
	if r.DriverVersion, err = lib.DriverVersion(); err != nil {
		return r, fmt.Errorf("driver version: %w", err)
	}
	n, err := lib.DeviceCount()
	if err != nil {
		return r, fmt.Errorf("device count: %w", err)
	}
	for i := 0; i < n; i++ {
		dev, err := lib.Device(i)
		if err != nil {
			return r, fmt.Errorf("device %d: %w", i, err)
		}
		r.Devices = append(r.Devices, probeDevice(i, dev, r.DriverVersion))
	}
	return r, nil
}

func probeDevice(i int, dev nvml.Device, driver string) Device {
	d := Device{Index: i}
	note := func(what string, err error) {
		if err != nil {
			d.Errors = append(d.Errors, fmt.Sprintf("%s: %v", what, err))
		}
	}
	var err error
	d.UUID, err = dev.UUID()
	note("uuid", err)
	d.ProductName, err = dev.Name()
	note("name", err)
	d.MemoryMiB, err = dev.MemoryMiB()
	note("memory", err)
	pci, err := dev.PCIDeviceID()
	note("pci", err)
	d.PCIDeviceID = fmt.Sprintf("%#08x", pci)
	model, merr := mig.ModelForDevice(pci, d.ProductName, d.MemoryMiB)
	if merr == nil {
		d.Model = model.String()
	} else {
		d.Recognition = merr.Error()
	}
	cur, pend, err := dev.MIGMode()
	if nvml.ReturnOf(err) == nvml.ErrorNotSupported {
		return d
	}
	note("MIG mode", err)
	if err != nil {
		return d
	}
	d.MIGCapable, d.MIGMode, d.MIGPending = true, modeName(cur), modeName(pend)
	if cur != nvml.MIGEnabled {
		return d
	}
	for _, p := range nvmlProfiles {
		info, err := dev.GPUInstanceProfileInfo(p)
		if err != nil {
			continue // not supported on this GPU
		}
		pr := Profile{NVMLProfile: p, ID: info.ID, SliceCount: info.SliceCount, InstanceCount: info.InstanceCount, MemorySizeMB: info.MemorySizeMB,
			CopyEngines: info.CopyEngineCount, Decoders: info.DecoderCount, Encoders: info.EncoderCount, JPEG: info.JpegCount, OFA: info.OfaCount}
		pr.Placements, err = dev.GPUInstancePossiblePlacements(info)
		note(fmt.Sprintf("placements of profile %d", p), err)
		d.Profiles = append(d.Profiles, pr)
	}
	gis, err := nvml.ListInstances(dev, nvmlProfiles, ciProfiles)
	note("instances", err)
	for _, gi := range gis {
		in := Instance{GPUInstanceID: gi.ID, NVMLProfile: gi.Profile, Placement: gi.Placement}
		for _, ci := range gi.CIs {
			in.MIGDevices = append(in.MIGDevices, ci.MIGUUID)
		}
		d.Instances = append(d.Instances, in)
	}
	if merr != nil {
		d.TableDiffs = []string{"no internal/mig model matches: " + merr.Error()}
		return d
	}
	d.TableDiffs = compare(model, d.Profiles, driver)
	for j := range d.Profiles {
		for _, tp := range model.Profiles() {
			if tp.NVMLProfile == d.Profiles[j].NVMLProfile {
				d.Profiles[j].TableName = tp.Name
			}
		}
	}
	return d
}

// compare lists the differences between NVML's profiles and the model table, for a driver of
// that version.
func compare(m mig.Model, got []Profile, driver string) []string {
	var diffs []string
	byEnum := map[int]Profile{}
	for _, p := range got {
		byEnum[p.NVMLProfile] = p
	}
	for _, tp := range m.Profiles() {
		p, ok := byEnum[tp.NVMLProfile]
		if !ok {
			why := ""
			if !tp.SupportedBy(driver) {
				why = fmt.Sprintf(" (the table says it needs R%d; the driver is %s)", tp.MinDriver, driver)
			}
			diffs = append(diffs, fmt.Sprintf("%s (profile %d): in the table, not reported by NVML%s", tp.Name, tp.NVMLProfile, why))
			continue
		}
		delete(byEnum, tp.NVMLProfile)
		if p.ID != tp.SMIProfileID {
			diffs = append(diffs, fmt.Sprintf("%s: NVML id %d, table %d", tp.Name, p.ID, tp.SMIProfileID))
		}
		if p.SliceCount != tp.ComputeSlices || p.InstanceCount != tp.MaxCount {
			diffs = append(diffs, fmt.Sprintf("%s: NVML slices %d count %d, table %d and %d", tp.Name, p.SliceCount, p.InstanceCount, tp.ComputeSlices, tp.MaxCount))
		}
		var want []nvml.Placement
		for _, pl := range tp.Placements() {
			want = append(want, nvml.Placement{Start: pl.Start, Size: pl.Size})
		}
		if !slices.Equal(want, p.Placements) {
			diffs = append(diffs, fmt.Sprintf("%s: NVML placements %v, table %v", tp.Name, p.Placements, want))
		}
		if tp.MinDriver > 0 && !tp.SupportedBy(driver) {
			diffs = append(diffs, fmt.Sprintf("%s: reported by driver %s, the table says it needs R%d", tp.Name, driver, tp.MinDriver))
		}
	}
	extra := make([]int, 0, len(byEnum))
	for e := range byEnum {
		extra = append(extra, e)
	}
	slices.Sort(extra)
	for _, e := range extra {
		diffs = append(diffs, fmt.Sprintf("profile %d (nvidia-smi id %d): reported by NVML, not in the table", e, byEnum[e].ID))
	}
	return diffs
}
