package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/render"
)

// reconcilePriority applies the ResourceQuota that admits the agent's pods at their critical
// priority class where the apiserver keeps those classes from namespaces without one
// (spec.priority.criticalPriorityQuota: Enabled), or removes the one applied before. It runs
// before the agent's DaemonSet, whose pods such an apiserver refuses without it.
func (r *SlicerReconciler) reconcilePriority(ctx context.Context, o render.Options, res *result, apply applyFunc) {
	if o.Slicer.Spec.Priority.CriticalPriorityQuota == slicerv1alpha1.FeatureEnabled {
		apply("priority", render.CriticalPriorityQuotas(o))
		return
	}
	if o.AgentNamespace == o.Namespace {
		return
	}
	quota := render.CriticalPriorityQuota(o.AgentNamespace)
	var live corev1.ResourceQuota
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(quota), &live); {
	case err == nil:
		if !ownedBySlicer(&live) {
			return // the admin's: leave it
		}
	case client.IgnoreNotFound(err) == nil:
		return
	default:
		res.fail(fmt.Errorf("read ResourceQuota %s: %w", client.ObjectKeyFromObject(quota), err))
		return
	}
	if err := r.removeAll(ctx, []client.Object{quota}); err != nil {
		res.fail(fmt.Errorf("priority: %w", err))
	}
}
