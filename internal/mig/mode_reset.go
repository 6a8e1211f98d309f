package mig

// ModeChangeNeedsReset reports whether a change of MIG mode on a GPU of model m takes effect
// only after a GPU reset: on the Ampere GPUs (A100, A30), not on Hopper and later, by NVIDIA's
// MIG user guide ("Enable MIG Mode") and nvmlDeviceSetMigMode's activation status
// NVML_ERROR_RESET_REQUIRED (go-nvml's pkg/nvml/nvml.h). False for the zero Model: whether an
// unknown GPU needs one is not known.
func (m Model) ModeChangeNeedsReset() bool {
	switch m {
	case A30_24GB, A100_40GB, A100_80GB:
		return true
	}
	return false
}
