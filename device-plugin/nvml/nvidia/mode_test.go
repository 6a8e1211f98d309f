package nvidia_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia/nvidiamock"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvmltest"
	"github.com/slicer-operator/slicer/internal/mig"
)

// The MIG mode rules of the conformance suite, through the real adapter, on NVIDIA's mock of
// each Ampere GPU with the driver's mode rules (nvidiamock/mode.go).
func TestModeConformanceOnNVIDIAMock(t *testing.T) {
	for config, model := range map[string]mig.Model{
		"A100-40GB": mig.A100_40GB, "A100-PCIE-80GB": mig.A100_80GB, "A30-24GB": mig.A30_24GB,
	} {
		t.Run(config, func(t *testing.T) {
			lib, m := mockLibrary(t, config)
			d := m.Mock(0)
			nvmltest.RunMode(t, lib, 0, model, nvmltest.ModeHooks{
				Reset: func() error { return nvml.NewError("DeviceReset", nvml.Return(d.ResetGPU()), "") },
				Hold:  d.Hold,
			})
		})
	}
}

// The adapter passes the call's return and the activation status apart: the call can fail
// (no permission) or succeed with a pending activation.
func TestSetMIGModeReturns(t *testing.T) {
	lib, m := mockLibrary(t, "A30-24GB")
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	activation, err := dev.SetMIGMode(nvml.MIGDisabled)
	if err != nil || activation != nvml.ErrorResetRequired {
		t.Errorf("SetMIGMode(disabled) on an A30 = %s, %v; want activation ERROR_RESET_REQUIRED", activation, err)
	}
	if c, p, err := dev.MIGMode(); err != nil || c != nvml.MIGEnabled || p != nvml.MIGDisabled {
		t.Errorf("MIGMode = %s/%s, %v; want Enabled/Disabled", c, p, err)
	}
	var called []string
	m.Forbid(func(call string) { called = append(called, call) })
	if _, err := dev.SetMIGMode(nvml.MIGEnabled); nvml.ReturnOf(err) != nvml.ErrorNoPermission {
		t.Errorf("SetMIGMode without permission: %v, want ERROR_NO_PERMISSION", err)
	}
	if len(called) != 1 || called[0] != "DeviceSetMigMode" {
		t.Errorf("forbidden calls %v, want [DeviceSetMigMode]", called)
	}
}

// Topology: the adapter reads the common ancestor and NVLink P2P status NVML reports for a
// pair, refuses a device that is not its own, and passes ERROR_NOT_SUPPORTED through.
func TestTopologyOnNVIDIAMock(t *testing.T) {
	cfg := nvidiamock.Configs["A100-40GB"]
	m, err := nvidiamock.New(cfg, cfg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lib := nvidia.FromInterface(m)
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs := make([]nvml.Device, 3)
	for i := range devs {
		if devs[i], err = lib.Device(i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := devs[0].TopologyCommonAncestor(devs[1]); nvml.ReturnOf(err) != nvml.ErrorNotSupported {
		t.Errorf("topology without one: %v, want ERROR_NOT_SUPPORTED", err)
	}
	// 0 and 1 NVLink peers behind one switch, 2 across the system.
	m.SetTopology(func(i, j int) (gonvml.GpuTopologyLevel, bool) {
		if i+j == 1 {
			return gonvml.TOPOLOGY_SINGLE, true
		}
		return gonvml.TOPOLOGY_SYSTEM, false
	})
	for _, tc := range []struct {
		i, j   int
		level  nvml.TopologyLevel
		nvlink bool
	}{
		{0, 1, nvml.TopologySingle, true},
		{1, 0, nvml.TopologySingle, true},
		{0, 2, nvml.TopologySystem, false},
		{2, 1, nvml.TopologySystem, false},
	} {
		level, err := devs[tc.i].TopologyCommonAncestor(devs[tc.j])
		if err != nil || level != tc.level {
			t.Errorf("TopologyCommonAncestor(%d, %d) = %s, %v; want %s", tc.i, tc.j, level, err, tc.level)
		}
		nvlink, err := devs[tc.i].NVLinkPeer(devs[tc.j])
		if err != nil || nvlink != tc.nvlink {
			t.Errorf("NVLinkPeer(%d, %d) = %t, %v; want %t", tc.i, tc.j, nvlink, err, tc.nvlink)
		}
	}
	b, err := emulated.New(emulated.Options{Node: "n1", GPUs: []mig.Model{mig.A100_40GB}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	foreign, err := b.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devs[0].TopologyCommonAncestor(foreign); nvml.ReturnOf(err) != nvml.ErrorInvalidArgument {
		t.Errorf("topology to a device of another backend: %v, want ERROR_INVALID_ARGUMENT", err)
	}
	if _, err := devs[0].NVLinkPeer(foreign); nvml.ReturnOf(err) != nvml.ErrorInvalidArgument {
		t.Errorf("NVLink to a device of another backend: %v, want ERROR_INVALID_ARGUMENT", err)
	}
}

// ResetGPU runs nvidia-smi --gpu-reset on the GPU's UUID (NVML has no reset call) and reports
// its failure with its output. A script stands in for nvidia-smi: what the driver does on a
// reset is the mock's ResetGPU, exercised by TestModeConformanceOnNVIDIAMock.
func TestResetGPURunsNvidiaSMI(t *testing.T) {
	lib, _ := mockLibrary(t, "A100-40GB")
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	uuid, err := dev.UUID()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	smi := filepath.Join(dir, "nvidia-smi")
	script := "#!/bin/sh\necho \"$@\" > " + args + "\n"
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	lib.NvidiaSMI = smi
	if err := lib.ResetGPU(0); err != nil {
		t.Fatalf("ResetGPU: %v", err)
	}
	got, err := os.ReadFile(args)
	if err != nil || strings.TrimSpace(string(got)) != "--gpu-reset -i "+uuid {
		t.Fatalf("nvidia-smi called with %q (%v), want --gpu-reset -i %s", got, err, uuid)
	}
	fail := filepath.Join(dir, "failing-smi")
	if err := os.WriteFile(fail, []byte("#!/bin/sh\necho 'GPU is in use by another client'; exit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	lib.NvidiaSMI = fail
	if err := lib.ResetGPU(0); err == nil || !strings.Contains(err.Error(), "in use by another client") {
		t.Fatalf("a failing reset: %v", err)
	}
	if err := lib.ResetGPU(7); err == nil {
		t.Fatal("reset of a GPU that is not there")
	}
}
