package engine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// Foreign reports whether another tool owns the node's MIG devices (migapi.NodeForeign:
// NVIDIA's MIG manager label, or another device plugin advertising NVIDIA's resources), from
// a read of the Node: n and err as the read returned them; served are the NVIDIA resources the
// caller's own plugin advertises. A node not found (a test without one) has no other owner.
// Both frontends ask it on every pass, before they touch a GPU, so they refuse the same nodes.
func Foreign(n *corev1.Node, err error, served ...string) (migapi.Foreign, error) {
	if apierrors.IsNotFound(err) {
		return migapi.NodeForeign(nil), nil
	}
	if err != nil {
		return migapi.Foreign{}, fmt.Errorf("get node: %w", err)
	}
	return migapi.NodeForeign(n, served...), nil
}

// RuntimeBypass reports whether a RuntimeClass selects the NVIDIA container runtime the node
// offers (migapi.RuntimeBypass), from the Node (nil: not found) and the cluster's
// RuntimeClasses as listed, err the list's error: a list that failed leaves it Unknown.
// Both frontends report it on their NodeAccelerator; neither acts on it.
func RuntimeBypass(node *corev1.Node, classes []nodev1.RuntimeClass, err error) migapi.Bypass {
	if err != nil {
		return migapi.Bypass{Unknown: true, Message: fmt.Sprintf("the RuntimeClasses could not be read: %v", err)}
	}
	return migapi.RuntimeBypass(node, classes)
}
