package dra

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// foreignOwner reports whether another tool owns the node's MIG devices (engine.Foreign,
// which the device-plugin frontend asks too), from a live read of the Node.
func (d *Driver) foreignOwner(ctx context.Context) (migapi.Foreign, error) {
	return engine.Foreign(d.opts.Client.CoreV1().Nodes().Get(ctx, d.opts.NodeName, metav1.GetOptions{}))
}

// foreignErr is why nothing is prepared while another tool owns the node: Slicer then
// creates and destroys no MIG instance there, in DRA mode as in device-plugin mode
// (device-plugin/agent/decide.go).
func foreignErr(f migapi.Foreign) error {
	return errors.New(f.Message)
}
