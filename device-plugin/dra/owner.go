package dra

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// errForeignMIGManager is why nothing is prepared while another MIG manager owns the node: the
// node carries NVIDIA's MIG manager label, and Slicer then changes no MIG geometry, in DRA
// mode as in device-plugin mode (device-plugin/agent/decide.go).
var errForeignMIGManager = errors.New("the node carries " + slicerv1alpha1.LabelNVIDIAMIGConfig +
	": another MIG manager owns its GPUs, so Slicer creates and destroys no MIG instance here")

// foreignManager reports whether the node carries NVIDIA's MIG manager label. A node not
// found (a test without one) has none.
func (d *Driver) foreignManager(ctx context.Context) (bool, error) {
	n, err := d.opts.Client.CoreV1().Nodes().Get(ctx, d.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get node %s: %w", d.opts.NodeName, err)
	}
	_, ok := n.Labels[slicerv1alpha1.LabelNVIDIAMIGConfig]
	return ok, nil
}
