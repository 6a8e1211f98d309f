package nvidia_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvmltest"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Without a driver, Init must fail with a driver-unavailable code, not panic.
// With one, the conformance suite runs only on the GPU named by
// SLICER_NVML_CONFORMANCE_GPU (it creates and destroys MIG instances there).
func TestReal(t *testing.T) {
	lib := nvidia.New("")
	err := lib.Init()
	if err != nil {
		if !nvml.IsDriverUnavailable(err) {
			t.Fatalf("Init without a driver: %v, want library not found / driver not loaded", err)
		}
		t.Skipf("no NVIDIA driver: %v", err)
	}
	defer func() {
		if err := lib.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
	idx, convErr := strconv.Atoi(os.Getenv("SLICER_NVML_CONFORMANCE_GPU"))
	if convErr != nil {
		t.Skip("set SLICER_NVML_CONFORMANCE_GPU=<index of an idle, MIG-enabled GPU> to run the destructive conformance suite")
	}
	dev, err := lib.Device(idx)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := dev.Name()
	mem, _ := dev.MemoryMiB()
	pci, _ := dev.PCIDeviceID()
	m, err := mig.ModelForDevice(pci, name, mem)
	if err != nil {
		t.Fatal(err)
	}
	nvmltest.Run(t, lib, idx, m)
}
