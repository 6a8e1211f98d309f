package dra

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// foreignOwner reports whether another tool owns the node's MIG devices: NVIDIA's MIG
// manager label, or another device plugin advertising NVIDIA's resources there. The fact is
// migapi.NodeForeign's, which the device-plugin frontend asks too
// (device-plugin/agent/observe.go), so both frontends refuse the same nodes. A node not found
// (a test without one) has no other owner.
func (d *Driver) foreignOwner(ctx context.Context) (migapi.Foreign, error) {
	n, err := d.opts.Client.CoreV1().Nodes().Get(ctx, d.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return migapi.NodeForeign(nil), nil
	}
	if err != nil {
		return migapi.Foreign{}, fmt.Errorf("get node %s: %w", d.opts.NodeName, err)
	}
	return migapi.NodeForeign(n), nil
}

// foreignErr is why nothing is prepared while another tool owns the node: Slicer then
// creates and destroys no MIG instance there, in DRA mode as in device-plugin mode
// (device-plugin/agent/decide.go).
func foreignErr(f migapi.Foreign) error {
	return errors.New(f.Message)
}
