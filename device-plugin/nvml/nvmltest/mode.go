package nvmltest

import (
	"testing"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// ModeHooks are what RunMode needs of a backend beyond nvml.Library to exercise every MIG mode
// rule; a nil hook skips the checks that need it (on real hardware: a GPU reset is
// nvidia-smi -r, a holding client is DCGM).
type ModeHooks struct {
	// Reset resets the GPU under test: its pending MIG mode becomes current.
	Reset func() error
	// Hold makes a client hold the GPU under test, or releases it.
	Hold func(held bool)
}

// RunMode checks the MIG mode rules of docs/design/geometry.md ("MIG mode") that hold on every
// GPU generation, on lib's device index: an empty, MIG-enabled GPU of model m, which it leaves
// so. A change is current at once (activation SUCCESS) or pending (ERROR_RESET_REQUIRED, or
// ERROR_IN_USE while a client holds the GPU), and MIGMode says which; it is refused while a
// GPU instance exists; MIG calls fail with ERROR_NOT_SUPPORTED while MIG mode is off.
func RunMode(t *testing.T, lib nvml.Library, index int, m mig.Model, hooks ModeHooks) {
	t.Helper()
	dev, err := lib.Device(index)
	if err != nil {
		t.Fatalf("Device(%d): %v", index, err)
	}
	wantMode(t, dev, "at the start", nvml.MIGEnabled, nvml.MIGEnabled)
	p := m.Profiles()[0]
	info, err := dev.GPUInstanceProfileInfo(p.NVMLProfile)
	if err != nil {
		t.Fatalf("%s: profile info: %v", p.Name, err)
	}
	// settle brings the GPU back to MIG mode enabled, current and pending.
	settle := func(t *testing.T) {
		t.Helper()
		activation, err := dev.SetMIGMode(nvml.MIGEnabled)
		if err != nil {
			t.Fatalf("SetMIGMode(enabled): %v", err)
		}
		if activation == nvml.ErrorResetRequired && hooks.Reset != nil {
			if err := hooks.Reset(); err != nil {
				t.Fatalf("reset: %v", err)
			}
		}
		wantMode(t, dev, "settled", nvml.MIGEnabled, nvml.MIGEnabled)
	}

	t.Run("asking for the current mode changes nothing", func(t *testing.T) {
		activation, err := dev.SetMIGMode(nvml.MIGEnabled)
		if err != nil || activation != nvml.Success {
			t.Errorf("SetMIGMode(enabled) on an enabled GPU = %s, %v; want SUCCESS", activation, err)
		}
		wantMode(t, dev, "after it", nvml.MIGEnabled, nvml.MIGEnabled)
	})

	t.Run("refused while a GPU instance exists", func(t *testing.T) {
		gi, err := dev.CreateGPUInstanceWithPlacement(info, nvml.Placement{Start: p.Starts[0], Size: p.MemorySlices})
		if err != nil {
			t.Fatalf("create GPU instance: %v", err)
		}
		if _, err := dev.SetMIGMode(nvml.MIGDisabled); !nvml.IsInUse(err) {
			t.Errorf("SetMIGMode(disabled) with a GPU instance: %v, want ERROR_IN_USE", err)
		}
		wantMode(t, dev, "after the refusal", nvml.MIGEnabled, nvml.MIGEnabled)
		if err := gi.Destroy(); err != nil {
			t.Fatalf("destroy GPU instance: %v", err)
		}
	})

	t.Run("switch off and on", func(t *testing.T) {
		defer settle(t)
		activation, err := dev.SetMIGMode(nvml.MIGDisabled)
		if err != nil {
			t.Fatalf("SetMIGMode(disabled): %v", err)
		}
		switch activation {
		case nvml.Success:
			wantMode(t, dev, "after a switch that took effect", nvml.MIGDisabled, nvml.MIGDisabled)
		case nvml.ErrorResetRequired:
			wantMode(t, dev, "after a switch waiting for a reset", nvml.MIGEnabled, nvml.MIGDisabled)
			if _, err := dev.GPUInstanceProfileInfo(p.NVMLProfile); err != nil {
				t.Errorf("profile info while MIG mode off is pending (MIG mode is still on): %v", err)
			}
			if hooks.Reset == nil {
				return
			}
			if err := hooks.Reset(); err != nil {
				t.Fatalf("reset: %v", err)
			}
			wantMode(t, dev, "after the reset", nvml.MIGDisabled, nvml.MIGDisabled)
		default:
			t.Fatalf("SetMIGMode(disabled) activation %s on an idle GPU; want SUCCESS or ERROR_RESET_REQUIRED", activation)
		}
		if _, err := dev.GPUInstanceProfileInfo(p.NVMLProfile); nvml.ReturnOf(err) != nvml.ErrorNotSupported {
			t.Errorf("profile info with MIG off: %v, want ERROR_NOT_SUPPORTED", err)
		}
		if _, err := dev.CreateGPUInstanceWithPlacement(info, nvml.Placement{Start: p.Starts[0], Size: p.MemorySlices}); nvml.ReturnOf(err) != nvml.ErrorNotSupported {
			t.Errorf("create GPU instance with MIG off: %v, want ERROR_NOT_SUPPORTED", err)
		}
	})

	t.Run("a pending change is cancelled by asking for the current mode", func(t *testing.T) {
		defer settle(t)
		activation, err := dev.SetMIGMode(nvml.MIGDisabled)
		if err != nil {
			t.Fatalf("SetMIGMode(disabled): %v", err)
		}
		if activation == nvml.Success {
			return // nothing was pending (Hopper and later)
		}
		activation, err = dev.SetMIGMode(nvml.MIGEnabled)
		if err != nil || activation != nvml.Success {
			t.Errorf("SetMIGMode(enabled) with disabled pending = %s, %v; want SUCCESS", activation, err)
		}
		wantMode(t, dev, "after the cancel", nvml.MIGEnabled, nvml.MIGEnabled)
	})

	if hooks.Hold == nil {
		return
	}
	t.Run("a holding client keeps the change pending", func(t *testing.T) {
		defer settle(t)
		hooks.Hold(true)
		defer hooks.Hold(false)
		activation, err := dev.SetMIGMode(nvml.MIGDisabled)
		if err != nil || activation != nvml.ErrorInUse {
			t.Fatalf("SetMIGMode(disabled) while held = %s, %v; want activation ERROR_IN_USE", activation, err)
		}
		wantMode(t, dev, "while held", nvml.MIGEnabled, nvml.MIGDisabled)
		if hooks.Reset != nil {
			if err := hooks.Reset(); !nvml.IsInUse(err) {
				t.Errorf("reset while held: %v, want ERROR_IN_USE", err)
			}
			wantMode(t, dev, "after the refused reset", nvml.MIGEnabled, nvml.MIGDisabled)
		}
		hooks.Hold(false)
		activation, err = dev.SetMIGMode(nvml.MIGDisabled)
		if err != nil || activation == nvml.ErrorInUse {
			t.Errorf("SetMIGMode(disabled) once released = %s, %v; want it activated or waiting for a reset", activation, err)
		}
	})
}

func wantMode(t *testing.T, dev nvml.Device, when string, current, pending nvml.MIGMode) {
	t.Helper()
	c, p, err := dev.MIGMode()
	if err != nil || c != current || p != pending {
		t.Errorf("%s: MIGMode = %s/%s, %v; want %s/%s", when, c, p, err, current, pending)
	}
}
