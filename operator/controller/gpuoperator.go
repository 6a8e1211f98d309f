package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/render"
)

// GPUOperatorLabelsFieldManager is the server-side-apply field manager of the NVIDIA GPU
// operator's deploy labels on Slicer's nodes (render.GPUOperatorNodeLabels), under a manager
// of their own so that no other field of a Node is ever theirs, and so that applying less
// releases (removes) what Slicer set. The driver upgrade's keys have theirs
// (DriverUpgradeFieldManager).
const GPUOperatorLabelsFieldManager = slicerv1alpha1.OperatorName + "-gpu-operator-labels"

// gpuOperatorGroupVersion is the NVIDIA GPU operator's API (its ClusterPolicy).
const gpuOperatorGroupVersion = "nvidia.com/v1"

// reconcileGPUOperatorLabels keeps the GPU operator's device plugin and MIG manager off the
// nodes Slicer manages, where render.TurnsGPUOperatorOff says so, and restores the labels of
// every other node Slicer set them on (a node no longer Slicer's, another driver mode, the
// GPU operator gone). It returns the error of the nodes it could not write.
func (r *SlicerReconciler) reconcileGPUOperatorLabels(ctx context.Context, o render.Options) error {
	return r.applyGPUOperatorLabels(ctx, render.TurnsGPUOperatorOff(o))
}

// restoreGPUOperatorLabels puts back, on every node, the GPU operator's deploy labels as they
// were before Slicer set them (removing those that were absent). Uninstalling calls it before
// the finalizer goes (finalize); once it returned nil no node carries Slicer's record.
func (r *SlicerReconciler) restoreGPUOperatorLabels(ctx context.Context) error {
	return r.applyGPUOperatorLabels(ctx, false)
}

func (r *SlicerReconciler) applyGPUOperatorLabels(ctx context.Context, off bool) error {
	nodes, err := r.gpuOperatorNodes(ctx)
	if err != nil {
		return err
	}
	log := logf.FromContext(ctx)
	var errs []error
	for _, n := range nodes {
		want, err := render.GPUOperatorNodeLabels(n, off && render.ManagedNode(n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if want == nil {
			continue
		}
		err = r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(want), client.FieldOwner(GPUOperatorLabelsFieldManager), client.ForceOwnership)
		switch {
		case apierrors.IsNotFound(err):
			// The node is gone, and its labels with it.
		case err != nil:
			errs = append(errs, fmt.Errorf("GPU operator labels of node %s: %w", n.Name, err))
		default:
			log.Info("GPU operator deploy labels written", "node", n.Name, "off", off && render.ManagedNode(n))
		}
	}
	return errors.Join(errs...)
}

// gpuOperatorNodes lists the nodes the step may write: those Slicer manages, and those that
// carry a deploy label at "false" (among them every node with Slicer's record, since Slicer
// sets both). Read through APIReader from the API server's watch cache: the manager's cache
// holds only the nodes with a GPU model label (operator/manager).
func (r *SlicerReconciler) gpuOperatorNodes(ctx context.Context) ([]*corev1.Node, error) {
	reader := r.apiReader()
	seen := map[string]bool{}
	var out []*corev1.Node
	for _, sel := range []client.MatchingLabels{
		{slicerv1alpha1.LabelMIGCapable: "true"},
		{slicerv1alpha1.LabelGPUOperatorDeployDevicePlugin: render.GPUOperatorOff},
		{slicerv1alpha1.LabelGPUOperatorDeployMIGManager: render.GPUOperatorOff},
	} {
		var list corev1.NodeList
		if err := reader.List(ctx, &list, sel, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		for i := range list.Items {
			if n := &list.Items[i]; !seen[n.Name] {
				seen[n.Name] = true
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// gpuOperatorLabelsChanged passes Node events that change what reconcileGPUOperatorLabels
// reads: Slicer's node label, the deploy labels and Slicer's record.
func gpuOperatorLabelsChanged() predicate.Funcs {
	facts := func(o client.Object) [4]string {
		l, a := o.GetLabels(), o.GetAnnotations()
		return [4]string{l[slicerv1alpha1.LabelMIGCapable], l[slicerv1alpha1.LabelGPUOperatorDeployDevicePlugin],
			l[slicerv1alpha1.LabelGPUOperatorDeployMIGManager], a[slicerv1alpha1.AnnotationGPUOperatorLabels]}
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return facts(e.Object) != [4]string{} },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return facts(e.ObjectOld) != facts(e.ObjectNew) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
