package emulated

import (
	"encoding/json"
	"fmt"
	"os"

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
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("emulated NVML state: %w", err)
	}
	var p persisted
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("emulated NVML state %s: %w", path, err)
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
