package engine

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Both frontends read the Node their own way and get one answer: a node NVIDIA's MIG manager
// owns is foreign, a node not found has no other owner, any other read error is an error.
func TestForeign(t *testing.T) {
	owned := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{slicerv1alpha1.LabelNVIDIAMIGConfig: "all-1g.10gb"}}}
	if f, err := Foreign(owned, nil); err != nil || !f.Present() || f.Reason != slicerv1alpha1.ReasonForeignMIGManager {
		t.Errorf("a node with %s: %+v, %v", slicerv1alpha1.LabelNVIDIAMIGConfig, f, err)
	}
	if f, err := Foreign(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, nil); err != nil || f.Present() {
		t.Errorf("a plain node: %+v, %v", f, err)
	}
	if f, err := Foreign(&corev1.Node{}, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "n1")); err != nil || f.Present() {
		t.Errorf("no node: %+v, %v", f, err)
	}
	if _, err := Foreign(&corev1.Node{}, errors.New("connection refused")); err == nil {
		t.Error("a failed read is no error")
	}
}
