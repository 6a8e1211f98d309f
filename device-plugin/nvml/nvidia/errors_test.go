package nvidia_test

import (
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia/nvidiamock"
)

// A driver that fails a call: the adapter returns NVML's code, names the call, and says what a
// missing driver means.
func TestAdapterPassesDriverErrorsThrough(t *testing.T) {
	m, err := nvidiamock.New(nvidiamock.Configs["A100-40GB"])
	if err != nil {
		t.Fatal(err)
	}
	m.Server().InitFunc = func() gonvml.Return { return gonvml.ERROR_DRIVER_NOT_LOADED }
	err = nvidia.FromInterface(m).Init()
	if !nvml.IsDriverUnavailable(err) || !strings.Contains(err.Error(), "kernel driver is not loaded") {
		t.Errorf("Init with the kernel module missing: %v", err)
	}

	lib, m := mockLibrary(t, "A100-40GB")
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dev.GPUInstanceProfileInfo(0)
	if err != nil {
		t.Fatal(err)
	}
	raw := m.Mock(0).Raw()
	placements := raw.GetGpuInstancePossiblePlacementsFunc
	raw.GetGpuInstancePossiblePlacementsFunc = func(*gonvml.GpuInstanceProfileInfo) ([]gonvml.GpuInstancePlacement, gonvml.Return) {
		return nil, gonvml.ERROR_UNKNOWN
	}
	if _, err := dev.GPUInstancePossiblePlacements(info); nvml.ReturnOf(err) != nvml.ErrorUnknown ||
		!strings.Contains(err.Error(), "DeviceGetGpuInstancePossiblePlacements") {
		t.Errorf("placements when the driver fails: %v", err)
	}
	raw.GetGpuInstancePossiblePlacementsFunc = placements

	// A GPU that falls off the bus between two calls.
	raw.GetGpuInstanceProfileInfoFunc = func(int) (gonvml.GpuInstanceProfileInfo, gonvml.Return) {
		return gonvml.GpuInstanceProfileInfo{}, gonvml.ERROR_GPU_IS_LOST
	}
	lost := func(what string, err error) {
		t.Helper()
		if nvml.ReturnOf(err) != nvml.ErrorGPUIsLost {
			t.Errorf("%s on a lost GPU: %v, want ERROR_GPU_IS_LOST", what, err)
		}
	}
	_, err = dev.GPUInstanceProfileInfo(0)
	lost("profile info", err)
	_, err = dev.GPUInstancePossiblePlacements(info)
	lost("placements", err)
	_, err = dev.CreateGPUInstanceWithPlacement(info, nvml.Placement{Start: 0, Size: 1})
	lost("create", err)
	_, err = dev.GPUInstances(info)
	lost("list", err)

	raw.GetUUIDFunc = func() (string, gonvml.Return) { return "", gonvml.ERROR_GPU_IS_LOST }
	raw.GetNameFunc = func() (string, gonvml.Return) { return "", gonvml.ERROR_GPU_IS_LOST }
	raw.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, gonvml.ERROR_GPU_IS_LOST }
	raw.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) { return gonvml.PciInfo{}, gonvml.ERROR_GPU_IS_LOST }
	raw.GetMigModeFunc = func() (int, int, gonvml.Return) { return 0, 0, gonvml.ERROR_GPU_IS_LOST }
	_, err = dev.UUID()
	lost("uuid", err)
	_, err = dev.Name()
	lost("name", err)
	_, err = dev.MemoryMiB()
	lost("memory", err)
	_, err = dev.PCIDeviceID()
	lost("pci", err)
	_, _, err = dev.MIGMode()
	lost("MIG mode", err)
}
