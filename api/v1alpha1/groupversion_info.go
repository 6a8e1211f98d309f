// Package v1alpha1 holds the slicer.dev/v1alpha1 API: Slicer (the install),
// NodeAccelerator (what a node's agent reports) and SliceAllocation (one MIG
// slice held by one pod).
//
// +kubebuilder:object:generate=true
// +groupName=slicer.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "slicer.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Slicer{}, &SlicerList{},
		&NodeAccelerator{}, &NodeAcceleratorList{},
		&SliceAllocation{}, &SliceAllocationList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
