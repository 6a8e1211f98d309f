package dra

import (
	"context"
	"errors"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// foreignOwner reports whether another tool owns the node's MIG devices (engine.Foreign,
// which the device-plugin frontend asks too), from a live read of the Node, and the node's
// labels (which select the GPU mode policies).
func (d *Driver) foreignOwner(ctx context.Context) (migapi.Foreign, map[string]string, error) {
	node, err := d.opts.Client.CoreV1().Nodes().Get(ctx, d.opts.NodeName, metav1.GetOptions{})
	foreign, ferr := engine.Foreign(node, err)
	if ferr != nil || err != nil {
		return foreign, nil, ferr
	}
	return foreign, node.Labels, nil
}

// nodeFacts reads, live, what both frontends tell from the API about the node: whether
// another tool owns its MIG devices (engine.Foreign), whether a RuntimeClass selects its
// NVIDIA runtime (engine.RuntimeBypass), and its labels.
func (d *Driver) nodeFacts(ctx context.Context) (migapi.Foreign, migapi.Bypass, map[string]string, error) {
	node, err := d.opts.Client.CoreV1().Nodes().Get(ctx, d.opts.NodeName, metav1.GetOptions{})
	foreign, ferr := engine.Foreign(node, err)
	if ferr != nil {
		return foreign, migapi.Bypass{}, nil, ferr
	}
	var labels map[string]string
	if err != nil {
		node = nil // not found
	} else {
		labels = node.Labels
	}
	classes, lerr := d.opts.Client.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
	var items []nodev1.RuntimeClass
	if lerr == nil {
		items = classes.Items
	}
	return foreign, engine.RuntimeBypass(node, items, lerr), labels, nil
}

// foreignErr is why nothing is prepared while another tool owns the node: Slicer then
// creates and destroys no MIG instance there, in DRA mode as in device-plugin mode
// (device-plugin/agent/decide.go).
func foreignErr(f migapi.Foreign) error {
	return errors.New(f.Message)
}
