package emulated

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// StateInstance is one GPU instance recorded in a state file, with the MIG
// device UUIDs of its compute instances (none for a bare GPU instance).
type StateInstance struct {
	GPUUUID   string
	Model     mig.Model
	Profile   string
	Placement mig.Placement
	MIGUUIDs  []string
}

// ReadStateFile returns the MIG instances a state file records: the device
// view of an emulated node, read without opening a backend (the agent owns
// the file; it replaces it atomically, so a reader never sees half a write).
func ReadStateFile(path string) ([]StateInstance, error) {
	p, err := readPersisted(path)
	if err != nil {
		return nil, err
	}
	var out []StateInstance
	for _, g := range p.GPUs {
		m, err := mig.ParseModel(g.Model)
		if err != nil {
			return nil, fmt.Errorf("emulated NVML state %s: GPU %s: %w", path, g.UUID, err)
		}
		for _, gi := range g.Instances {
			si := StateInstance{GPUUUID: g.UUID, Model: m, Profile: gi.Profile, Placement: gi.Placement}
			for _, ci := range gi.CIs {
				si.MIGUUIDs = append(si.MIGUUIDs, ci.UUID)
			}
			out = append(out, si)
		}
	}
	return out, nil
}

// StateGPU is one GPU recorded in a state file with its MIG modes (mode.go).
type StateGPU struct {
	UUID           string
	Model          mig.Model
	MIGMode        nvml.MIGMode
	PendingMIGMode nvml.MIGMode
	// ModeRecorded is false for a file written before modes were recorded: the backend then
	// keeps the configured mode, which the file does not say.
	ModeRecorded bool
}

// ReadStateGPUs returns the GPUs a state file records, by index, with their MIG modes: the
// device view of an emulated node (whole or sliced), read without opening a backend.
func ReadStateGPUs(path string) ([]StateGPU, error) {
	p, err := readPersisted(path)
	if err != nil {
		return nil, err
	}
	out := make([]StateGPU, 0, len(p.GPUs))
	for _, g := range p.GPUs {
		m, err := mig.ParseModel(g.Model)
		if err != nil {
			return nil, fmt.Errorf("emulated NVML state %s: GPU %s: %w", path, g.UUID, err)
		}
		sg := StateGPU{UUID: g.UUID, Model: m}
		if g.MIGMode != nil {
			sg.MIGMode, sg.PendingMIGMode, sg.ModeRecorded = *g.MIGMode, *g.MIGMode, true
		}
		if g.PendingMIGMode != nil {
			sg.PendingMIGMode = *g.PendingMIGMode
		}
		out = append(out, sg)
	}
	return out, nil
}

// Control is what a test outside the agent's process (e2e, on the node) asks of its
// emulated NVML: XIDs to raise and GPUs to recover (events.go). It is written to
// ControlPath(state file) with SendControl; the backend applies it once, at its next event
// wait (the health watcher waits in turn, so within a fraction of a second), and removes it.
type Control struct {
	XIDs    []ControlXID `json:"xids,omitempty"`
	Recover []int        `json:"recover,omitempty"`
	// Hold and Release are GPUs a client (as DCGM would) starts or stops holding; Reset
	// are GPUs to reset, after the holds and releases (mode.go).
	Hold    []int `json:"hold,omitempty"`
	Release []int `json:"release,omitempty"`
	Reset   []int `json:"reset,omitempty"`
}

// ControlXID is an XID of a Control; GPUInstance absent is the whole GPU.
type ControlXID struct {
	GPU            int                 `json:"gpu"`
	GPUInstance    *int                `json:"gpuInstance,omitempty"`
	XID            int                 `json:"xid"`
	RecoveryAction nvml.RecoveryAction `json:"recoveryAction,omitempty"`
	Unavailable    bool                `json:"unavailable,omitempty"`
}

// ControlPath is the control file of the backend whose state file is stateFile.
func ControlPath(stateFile string) string { return stateFile + ".control" }

// SendControl writes c for the backend of stateFile (atomically: temp file and rename).
func SendControl(stateFile string, c Control) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("emulated NVML control: %w", err)
	}
	tmp := ControlPath(stateFile) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("emulated NVML control: %w", err)
	}
	if err := os.Rename(tmp, ControlPath(stateFile)); err != nil {
		return fmt.Errorf("emulated NVML control: %w", err)
	}
	return nil
}

// ControlPending reports whether a control sent for stateFile is not applied yet.
func ControlPending(stateFile string) bool {
	_, err := os.Stat(ControlPath(stateFile))
	return err == nil
}

// applyControl applies and removes the backend's control file, if there is one; an
// unreadable or invalid one is removed too, and its error returned.
func (b *Backend) applyControl() error {
	if b.opts.StateFile == "" {
		return nil
	}
	path := ControlPath(b.opts.StateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	defer func() { _ = os.Remove(path) }()
	if err != nil {
		return fmt.Errorf("emulated NVML control: %w", err)
	}
	var c Control
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("emulated NVML control %s: %w", path, err)
	}
	var errs []error
	for _, x := range c.XIDs {
		gi := -1
		if x.GPUInstance != nil {
			gi = *x.GPUInstance
		}
		errs = append(errs, b.RaiseXID(XID{GPU: x.GPU, GPUInstance: gi, Code: x.XID, Action: x.RecoveryAction, Unavailable: x.Unavailable}))
	}
	for _, i := range c.Recover {
		errs = append(errs, b.Recover(i))
	}
	for _, i := range c.Hold {
		errs = append(errs, b.HoldGPU(i, true))
	}
	for _, i := range c.Release {
		errs = append(errs, b.HoldGPU(i, false))
	}
	for _, i := range c.Reset {
		errs = append(errs, b.ResetGPU(i))
	}
	return errors.Join(errs...)
}

// readPersisted reads and decodes a state file.
func readPersisted(path string) (persisted, error) {
	var p persisted
	data, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("emulated NVML state: %w", err)
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("emulated NVML state %s: %w", path, err)
	}
	return p, nil
}
