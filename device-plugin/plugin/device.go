// Package plugin is the kubelet device plugin of the agent: one gRPC server
// and socket per MIG profile resource (slicer.dev/mig-<profile>), devices =
// the node's realized slices.
package plugin

// Device is one advertised MIG slice.
type Device struct {
	// ID is the MIG device UUID.
	ID string
	// Resource is the extended resource name, e.g. slicer.dev/mig-1g.10gb.
	Resource string
	// CDIName is the fully qualified CDI device name (slicer.dev/mig=MIG-…).
	CDIName string
	Healthy bool
}
