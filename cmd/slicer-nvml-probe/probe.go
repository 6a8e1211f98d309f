package main

import (
	"fmt"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Report is what NVML says about the machine. The probe only reads.
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
	PCIDeviceID string `json:"pciDeviceId"`
	// Model is internal/mig's model for the device ("" when none matches).
	Model      string `json:"model"`
	MIGCapable bool   `json:"migCapable"`
	MIGMode    string `json:"migMode,omitempty"`
	MIGPending string `json:"migModePending,omitempty"`
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
	Placements    []nvml.Placement `json:"placements"`
}

// Instance is an existing GPU instance.
type Instance struct {
	GPUInstanceID int            `json:"gpuInstanceId"`
	NVMLProfile   int            `json:"nvmlProfile"`
	Placement     nvml.Placement `json:"placement"`
	MIGDevices    []string       `json:"migDevices,omitempty"`
}

// nvmlProfiles are the GPU_INSTANCE_PROFILE_* values the probe asks about.
var nvmlProfiles = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}

var ciProfiles = []int{0, 1, 2, 3, 4, 5, 6, 7}

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
		r.Devices = append(r.Devices, probeDevice(i, dev))
	}
	return r, nil
}

func probeDevice(i int, dev nvml.Device) Device {
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
		pr := Profile{NVMLProfile: p, ID: info.ID, SliceCount: info.SliceCount, InstanceCount: info.InstanceCount, MemorySizeMB: info.MemorySizeMB}
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
	if merr == nil {
		d.TableDiffs = compare(model, d.Profiles)
		for j := range d.Profiles {
			for _, tp := range model.Profiles() {
				if tp.NVMLProfile == d.Profiles[j].NVMLProfile {
					d.Profiles[j].TableName = tp.Name
				}
			}
		}
	} else {
		d.TableDiffs = []string{"no internal/mig model matches: " + merr.Error()}
	}
	return d
}

// compare lists the differences between NVML's profiles and the model table.
func compare(m mig.Model, got []Profile) []string {
	var diffs []string
	byEnum := map[int]Profile{}
	for _, p := range got {
		byEnum[p.NVMLProfile] = p
	}
	for _, tp := range m.Profiles() {
		p, ok := byEnum[tp.NVMLProfile]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s (profile %d): in the table, not reported by NVML", tp.Name, tp.NVMLProfile))
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
		if fmt.Sprint(want) != fmt.Sprint(p.Placements) {
			diffs = append(diffs, fmt.Sprintf("%s: NVML placements %v, table %v", tp.Name, p.Placements, want))
		}
	}
	for e := range byEnum {
		diffs = append(diffs, fmt.Sprintf("profile %d: reported by NVML, not in the table", e))
	}
	return diffs
}
