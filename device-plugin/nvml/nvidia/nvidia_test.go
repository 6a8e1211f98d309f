package nvidia_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia/nvidiamock"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvmltest"
	"github.com/slicer-operator/slicer/internal/mig"
)

// mockLibrary is the real adapter over NVIDIA's go-nvml mock of one GPU (nvidiamock.Configs),
// initialised, with MIG mode enabled as an administrator would.
func mockLibrary(t *testing.T, config string) (*nvidia.Library, *nvidiamock.Library) {
	t.Helper()
	cfg, ok := nvidiamock.Configs[config]
	if !ok {
		t.Fatalf("no go-nvml mock config %q", config)
	}
	m, err := nvidiamock.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Mock(0).EnableMIG()
	lib := nvidia.FromInterface(m)
	if err := lib.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() {
		if err := lib.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return lib, m
}

// recognise identifies the mock GPU the way the agent does: from what the adapter reads.
func recognise(t *testing.T, lib nvml.Library) mig.Model {
	t.Helper()
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	name, err := dev.Name()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := dev.MemoryMiB()
	if err != nil {
		t.Fatal(err)
	}
	pci, err := dev.PCIDeviceID()
	if err != nil {
		t.Fatal(err)
	}
	m, err := mig.ModelForDevice(pci, name, mem)
	if err != nil {
		t.Fatalf("ModelForDevice(%#x, %q, %d): %v", pci, name, mem, err)
	}
	return m
}

// The NVML conformance suite, run by the real adapter on NVIDIA's own data for the three
// Ampere models: internal/mig's placements and counts must be what NVIDIA's mock reports, and
// the adapter must pass the driver's error codes through.
func TestConformanceOnNVIDIAMock(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   mig.Model
		// walk every legal state (the PCIe parts share the SXM4 parts' MIG data)
		walk bool
	}{
		{"A100-40GB", mig.A100_40GB, true},
		{"A100-PCIE-40GB", mig.A100_40GB, false},
		{"A100-80GB", mig.A100_80GB, true},
		{"A100-PCIE-80GB", mig.A100_80GB, false},
		{"A30-24GB", mig.A30_24GB, true},
	} {
		t.Run(tc.config, func(t *testing.T) {
			lib, m := mockLibrary(t, tc.config)
			if got := recognise(t, lib); got != tc.want {
				t.Fatalf("recognised as %s, want %s", got, tc.want)
			}
			nvmltest.Run(t, lib, 0, tc.want)
			if tc.walk {
				states := nvmltest.RunStates(t, lib, 0, tc.want)
				t.Logf("%d legal states of %s agree with NVIDIA's mock", states, tc.want)
			}
			if n := m.Mock(0).Instances(); n != 0 {
				t.Errorf("%d GPU instances left after the suite", n)
			}
		})
	}
}

// The library-level calls, read through the adapter from the mock.
func TestLibraryCallsOnNVIDIAMock(t *testing.T) {
	lib, _ := mockLibrary(t, "A100-40GB")
	if v, err := lib.DriverVersion(); err != nil || v != nvidiamock.DriverVersion {
		t.Errorf("DriverVersion = %q, %v; want %q", v, err, nvidiamock.DriverVersion)
	}
	if n, err := lib.DeviceCount(); err != nil || n != 1 {
		t.Errorf("DeviceCount = %d, %v; want 1", n, err)
	}
	if _, err := lib.Device(1); nvml.ReturnOf(err) != nvml.ErrorInvalidArgument {
		t.Errorf("Device(1) on a one-GPU machine: %v, want ERROR_INVALID_ARGUMENT", err)
	}
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if pci, err := dev.PCIDeviceID(); err != nil || pci != 0x20B010DE {
		t.Errorf("PCIDeviceID = %#x, %v; want 0x20b010de (NVML's device<<16 | vendor)", pci, err)
	}
	if cur, pend, err := dev.MIGMode(); err != nil || cur != nvml.MIGEnabled || pend != nvml.MIGEnabled {
		t.Errorf("MIGMode = %v, %v, %v", cur, pend, err)
	}
	// NVIDIA's mock: the +me profile has the GPU's one OFA and JPEG engine.
	if info, err := dev.GPUInstanceProfileInfo(7); err != nil || info.OfaCount != 1 || info.JpegCount != 1 || info.DecoderCount != 1 || info.CopyEngineCount != 1 {
		t.Errorf("1g.5gb+me profile info = %+v, %v; want one copy engine, decoder, JPEG and OFA", info, err)
	}
	// A GPU_INSTANCE_PROFILE_* value the A100 does not have (the 1-slice graphics profile).
	if _, err := dev.GPUInstanceProfileInfo(10); nvml.ReturnOf(err) != nvml.ErrorNotSupported {
		t.Errorf("GPUInstanceProfileInfo(1_SLICE_GFX) on an A100: %v, want ERROR_NOT_SUPPORTED", err)
	}
}

// Without the NVIDIA library, Init fails with ERROR_LIBRARY_NOT_FOUND and says why; nothing
// panics.
func TestNoDriver(t *testing.T) {
	lib := nvidia.New("/nonexistent/libnvidia-ml.so.1")
	err := lib.Init()
	if nvml.ReturnOf(err) != nvml.ErrorLibraryNotFound || !nvml.IsDriverUnavailable(err) {
		t.Fatalf("Init without a driver: %v, want ERROR_LIBRARY_NOT_FOUND", err)
	}
	if !strings.Contains(err.Error(), "libnvidia-ml.so.1 not found") {
		t.Errorf("Init error %q does not say the library is missing", err)
	}
}

// With a driver, the conformance suite runs only on the GPU named by
// SLICER_NVML_CONFORMANCE_GPU (it creates and destroys MIG instances there).
func TestRealGPU(t *testing.T) {
	idx, convErr := strconv.Atoi(os.Getenv("SLICER_NVML_CONFORMANCE_GPU"))
	if convErr != nil {
		t.Skip("set SLICER_NVML_CONFORMANCE_GPU=<index of an idle, MIG-enabled GPU> to run the destructive conformance suite on real hardware")
	}
	lib := nvidia.New("")
	if err := lib.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	defer func() {
		if err := lib.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
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
