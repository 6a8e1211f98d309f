package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// CreateNode creates the node, writes its status, and removes the
// node.kubernetes.io/not-ready taint that admission adds (envtest runs no
// node lifecycle controller to remove it).
func CreateNode(ctx context.Context, c client.Client, node *corev1.Node) error {
	status := node.Status
	if err := c.Create(ctx, node); err != nil {
		return fmt.Errorf("create node %s: %w", node.Name, err)
	}
	node.Status = status
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("node %s status: %w", node.Name, err)
	}
	if len(node.Spec.Taints) > 0 {
		node.Spec.Taints = nil
		if err := c.Update(ctx, node); err != nil {
			return fmt.Errorf("untaint node %s: %w", node.Name, err)
		}
	}
	return nil
}

// CreateNodeAccelerator creates the NodeAccelerator and writes its status
// (as the agent would).
func CreateNodeAccelerator(ctx context.Context, c client.Client, na *slicerv1alpha1.NodeAccelerator) error {
	status := na.Status
	if err := c.Create(ctx, na); err != nil {
		return fmt.Errorf("create NodeAccelerator %s: %w", na.Name, err)
	}
	na.Status = status
	if err := c.Status().Update(ctx, na); err != nil {
		return fmt.Errorf("NodeAccelerator %s status: %w", na.Name, err)
	}
	return nil
}

// GPUModels maps the UUID of every GPU the NodeAccelerators report to its model, for checks
// of placement legality against internal/mig.
func GPUModels(ctx context.Context, c client.Reader) (map[string]mig.Model, error) {
	var accels slicerv1alpha1.NodeAcceleratorList
	if err := c.List(ctx, &accels); err != nil {
		return nil, fmt.Errorf("list NodeAccelerators: %w", err)
	}
	models := map[string]mig.Model{}
	for _, na := range accels.Items {
		for _, g := range na.Status.GPUs {
			m, err := mig.ParseModel(string(g.Model))
			if err != nil {
				return nil, fmt.Errorf("NodeAccelerator %s GPU %s: %w", na.Name, g.UUID, err)
			}
			models[g.UUID] = m
		}
	}
	return models, nil
}
