package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node labels and annotations of a driver upgrade (docs/driver-upgrade.md). Only the
// operator writes them, held to these keys by its node guard (operator/render/operatornodeguard.go).
const (
	// LabelDriverUpgrade is set on a node while the operator upgrades its driver, to the
	// node's step (DriverUpgradeStep). While it is there the Slicer scheduler places no MIG
	// pod on the node (scheduler/snapshot); at step Driver the agent's DaemonSet leaves the
	// node (its node affinity). Other pods on the node are not affected.
	LabelDriverUpgrade = "slicer.dev/driver-upgrade"
	// AnnotationDriverUpgradeSince is when the node entered its step (RFC 3339): the drain
	// timeout and the load timeout count from it, after an operator restart too.
	AnnotationDriverUpgradeSince = "slicer.dev/driver-upgrade-since"
)

// DriverUpgradeStep is where a node is in its driver upgrade: the value of LabelDriverUpgrade.
// +kubebuilder:validation:Enum=Drain;Driver;Verify
type DriverUpgradeStep string

const (
	// DriverUpgradeDrain: no new MIG pod is placed on the node; its MIG pods are evicted
	// (disruption budgets honoured) and the agent releases their slices.
	DriverUpgradeDrain DriverUpgradeStep = "Drain"
	// DriverUpgradeDriver: the agent is off the node and KMM is asked for the new version
	// (kmm.node.kubernetes.io/version-module.<namespace>.<module>); KMM unloads the old driver
	// and loads the new one.
	DriverUpgradeDriver DriverUpgradeStep = "Driver"
	// DriverUpgradeVerify: KMM loaded the new version; the agent runs again and the node
	// takes MIG pods once it is ready.
	DriverUpgradeVerify DriverUpgradeStep = "Verify"
)

// DrainTimeoutPolicy says what happens when a node's MIG pods have not left within the drain
// timeout.
// +kubebuilder:validation:Enum=Wait;Force
type DrainTimeoutPolicy string

const (
	// DrainTimeoutWait: the rollout stops (condition DriverUpgraded, reason
	// DriverUpgradeStalled, naming the node and the pods), evictions go on, and it resumes
	// once they are gone.
	DrainTimeoutWait DrainTimeoutPolicy = "Wait"
	// DrainTimeoutForce: the pods still there are deleted (their disruption budgets are not
	// consulted, as the uninstall's Force policy does) and the rollout goes on.
	DrainTimeoutForce DrainTimeoutPolicy = "Force"
)

// DriverUpgradeState says whether a driver rollout moves on.
// +kubebuilder:validation:Enum=Rolling;Paused
type DriverUpgradeState string

const (
	// DriverUpgradeRolling: the operator starts nodes as maxUnavailable allows.
	DriverUpgradeRolling DriverUpgradeState = "Rolling"
	// DriverUpgradePaused: no further node starts; the nodes under way finish their upgrade.
	DriverUpgradePaused DriverUpgradeState = "Paused"
)

// DriverUpgradeSpec says how a change of the driver (mode KMM) reaches the nodes: through
// KMM's ordered upgrade, node by node (docs/driver-upgrade.md).
type DriverUpgradeSpec struct {
	// maxUnavailable is how many nodes are upgraded at once.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxUnavailable int32 `json:"maxUnavailable,omitempty"`

	// drainTimeoutSeconds bounds how long a node's MIG pods may take to leave it through
	// the Eviction API before drainTimeoutPolicy applies.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	DrainTimeoutSeconds int32 `json:"drainTimeoutSeconds,omitempty"`

	// drainTimeoutPolicy: Wait (the default) stops the rollout with a condition naming the
	// node and the pods that did not leave; Force deletes them and goes on.
	// +optional
	// +kubebuilder:default=Wait
	DrainTimeoutPolicy DrainTimeoutPolicy `json:"drainTimeoutPolicy,omitempty"`

	// loadTimeoutSeconds bounds how long the agent may take to leave a drained node, KMM to
	// unload the old driver and load the new one, and the agent to serve again, before the
	// rollout stops with a condition naming the node (it goes on by itself once that step
	// ends).
	// +optional
	// +kubebuilder:default=900
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=86400
	LoadTimeoutSeconds int32 `json:"loadTimeoutSeconds,omitempty"`

	// state: Rolling (the default) moves on node by node; Paused starts no further node.
	// +optional
	// +kubebuilder:default=Rolling
	State DriverUpgradeState `json:"state,omitempty"`
}

// NodeDriverUpgrade is one node under way.
type NodeDriverUpgrade struct {
	// name of the node.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// step the node is in.
	// +required
	Step DriverUpgradeStep `json:"step"`

	// since when it is in that step.
	// +optional
	Since metav1.Time `json:"since,omitempty"`

	// message says what the step waits for.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
}

// DriverUpgradeStatus is where the driver stands on the nodes (mode KMM).
type DriverUpgradeStatus struct {
	// targetVersion is the driver version the spec asks for: the KMM Module's version, a
	// digest of the driver's settings (image, kernel mappings, build, signing, modules).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	TargetVersion string `json:"targetVersion,omitempty"`

	// updatedNodes run targetVersion.
	// +optional
	UpdatedNodes int32 `json:"updatedNodes,omitempty"`

	// outdatedNodes run another version and have not started (nodes under way are in nodes).
	// +optional
	OutdatedNodes int32 `json:"outdatedNodes,omitempty"`

	// nodes under way, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	Nodes []NodeDriverUpgrade `json:"nodes,omitempty"`
}

// ConditionDriverUpgraded (mode KMM) is True when every node Slicer manages runs the driver
// version the spec asks for; False while nodes are upgraded (DriverUpgrading), when the
// rollout stopped on a node (DriverUpgradeStalled, naming it and why), or is paused with nodes
// left (DriverUpgradePaused). Optional: nodes not under way keep serving.
const ConditionDriverUpgraded = "DriverUpgraded"

// Reasons of ConditionDriverUpgraded.
const (
	ReasonDriverUpgrading      = "DriverUpgrading"
	ReasonDriverUpgradeStalled = "DriverUpgradeStalled"
	ReasonDriverUpgradePaused  = "DriverUpgradePaused"
	// ReasonOrderedUpgradeUnavailable: KMM's version labels cannot name the Module (the agent
	// namespace is too long): a change of the driver reaches every node at once.
	ReasonOrderedUpgradeUnavailable = "OrderedUpgradeUnavailable"
)
