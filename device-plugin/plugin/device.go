// Package plugin is the kubelet device plugin of the agent: one gRPC server
// and socket per resource, each MIG profile's (slicer.dev/mig-<profile>, devices =
// the node's realized slices) and whole GPUs' (nvidia.com/gpu, devices = the GPUs
// allocations hold whole).
package plugin

// Device is one advertised MIG slice or whole GPU.
type Device struct {
	// ID is the device ID: its slot's (mig.Slot.DeviceID), which the kubelet checkpoints
	// for the pod; it outlives the instance, recreated at the slot after a reboot.
	ID string
	// MIGUUID is the MIG device of the instance now at the slot; for a whole GPU, the GPU's
	// UUID (what EnvVisibleDevices names).
	MIGUUID string
	// Resource is the extended resource name, e.g. slicer.dev/mig-1g.10gb.
	Resource string
	// CDIName is the fully qualified CDI device name (slicer.dev/mig=<ID>).
	CDIName string
	Healthy bool
}
