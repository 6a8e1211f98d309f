package engine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// Foreign reports whether another tool owns the node's MIG devices (migapi.NodeForeign:
// NVIDIA's MIG manager label, or another device plugin advertising NVIDIA's resources), from
// a read of the Node: n and err as the read returned them. A node not found (a test without
// one) has no other owner. Both frontends ask it on every pass, before they touch a GPU, so
// they refuse the same nodes.
func Foreign(n *corev1.Node, err error) (migapi.Foreign, error) {
	if apierrors.IsNotFound(err) {
		return migapi.NodeForeign(nil), nil
	}
	if err != nil {
		return migapi.Foreign{}, fmt.Errorf("get node: %w", err)
	}
	return migapi.NodeForeign(n), nil
}
