package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationMovable on a pod, with value "false", keeps defragmentation from
// ever moving it. Any other value, or none, leaves the decision to the other
// rules (a controller owns the pod, no PodDisruptionBudget forbids its eviction).
const AnnotationMovable = "slicer.dev/movable"

// PodConditionDefragmentationPlan is the condition Slicer's scheduler sets on a pending pod
// before it evicts pods for it in Evict mode; its message is the plan's record (the moves, the
// rooms held for their replacements, the placement opened), from which a restarted scheduler
// rebuilds what it held. It stays afterwards as the account of what was moved for the pod.
const PodConditionDefragmentationPlan corev1.PodConditionType = "slicer.dev/DefragmentationPlan"

// EventDefragmentationPlanned is the reason of the Event Slicer's scheduler puts on a pending
// pod with the plan of moves that would make room for it; `slicer slice-map` shows the latest
// under WHY PENDING.
const EventDefragmentationPlanned = "DefragmentationPlanned"

// DefragmentationMode says what Slicer does when a pending pod would fit the
// cluster's free compute and memory but no legal MIG placement is left.
// +kubebuilder:validation:Enum=Disabled;Recommend;Evict
type DefragmentationMode string

const (
	// DefragmentationDisabled plans nothing: a fragmented pod stays Pending.
	DefragmentationDisabled DefragmentationMode = "Disabled"
	// DefragmentationRecommend plans the fewest moves that would open a
	// placement and reports the plan on the pending pod; it evicts nothing.
	DefragmentationRecommend DefragmentationMode = "Recommend"
	// DefragmentationEvict executes the plan: it reserves the opened placement
	// and the moved pods' new placements, then evicts the moved pods through
	// the Eviction API.
	DefragmentationEvict DefragmentationMode = "Evict"
)

// The defaults of spec.defragmentation that Go code applies to a configuration without them
// (slicer-sim; the scheduler's maxMovesPerPlan default is internal/mig's DefaultDefragMoves).
// The +kubebuilder:default markers below carry the same values, and
// TestDefragmentationDefaultsMatchCRD keeps them in step.
const (
	DefaultDefragmentationMode   = DefragmentationEvict
	DefaultMaxEvictions          = 100
	DefaultEvictionWindowSeconds = 3600
)

// DefragmentationSpec is the policy for moving movable pods so a pending pod
// fits. A pod is movable only when a controller owns it, it is not annotated
// slicer.dev/movable: "false", no PodDisruptionBudget forbids its eviction,
// and its namespace matches namespaceSelector.
// +kubebuilder:validation:XValidation:rule="!has(self.maxMovesPerPlan) || !has(self.maxEvictions) || self.maxMovesPerPlan <= self.maxEvictions",message="maxMovesPerPlan must not exceed maxEvictions: a plan that needs more evictions than one window allows could never run",fieldPath=".maxMovesPerPlan"
type DefragmentationSpec struct {
	// mode is Disabled, Recommend (plan and report, evict nothing) or Evict
	// (the default: the packing it buys is measured in docs/benchmarks.md).
	// +optional
	// +kubebuilder:default=Evict
	Mode DefragmentationMode `json:"mode,omitempty"`

	// maxMovesPerPlan is the most pods one plan may move to open a placement
	// for one pending pod. Within it the planner looks for the fewest moves of
	// one or two pods to free places, then for a re-placing of the slices of a
	// few GPUs (some moved pods taking room others leave), then, within a
	// bound on its work, for three or four moves to free places.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4
	MaxMovesPerPlan int32 `json:"maxMovesPerPlan,omitempty"`

	// maxEvictions is the most pods defragmentation evicts within any
	// windowSeconds, cluster-wide (Evict mode). A plan that would go over the
	// cap waits.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxEvictions int32 `json:"maxEvictions,omitempty"`

	// windowSeconds is the sliding window maxEvictions counts over.
	// +optional
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=86400
	WindowSeconds int32 `json:"windowSeconds,omitempty"`

	// namespaceSelector limits the pods that may be moved to those in the
	// namespaces it matches. Unset, pods of every namespace may be moved.
	// It does not limit which pending pods a plan is made for.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="operator must be In, NotIn, Exists or DoesNotExist",fieldPath=".matchExpressions"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['Exists', 'DoesNotExist'] ? (!has(e.values) || size(e.values) == 0) : (has(e.values) && size(e.values) > 0))",message="values must be empty for Exists and DoesNotExist, and non-empty for In and NotIn",fieldPath=".matchExpressions"
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}
