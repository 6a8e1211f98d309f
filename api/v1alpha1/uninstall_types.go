package v1alpha1

// UninstallPolicy says what deleting the Slicer does while MIG pods hold slices.
// +kubebuilder:validation:Enum=Wait;Force
type UninstallPolicy string

const (
	// UninstallWait: deletion waits, with everything left running, until no pod holds a
	// slice; the Slicer's SlicesReleased condition names the pods that do.
	UninstallWait UninstallPolicy = "Wait"
	// UninstallForce: deletion deletes the pods that hold slices (their controllers may
	// recreate them; they stay Pending once the scheduler is gone), waits for the agents
	// to destroy their MIG instances and release their allocations, then removes the
	// agents, the driver and the rest.
	UninstallForce UninstallPolicy = "Force"
)

// UninstallSpec is what deleting the Slicer does to the pods that use it
// (docs/uninstall.md).
type UninstallSpec struct {
	// policy is Wait (the default: deletion waits until no pod holds a MIG slice, and
	// removes nothing meanwhile) or Force (deletion deletes those pods first, then releases
	// their slices, then removes the agents and the driver). It may be changed while the
	// Slicer is being deleted: setting Force on a deletion that waits releases the slices.
	// +optional
	// +kubebuilder:default=Wait
	Policy UninstallPolicy `json:"policy,omitempty"`
}
