package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/operator/render"
)

// The ResourceSlices of driver migdra.DriverName are the agents' (the kubelet DRA plugin
// publishes its node's pool). When no agent runs the plugin any more (uninstall, or a switch
// back to the device-plugin frontend), the operator deletes them: the kubelet wipes an
// unusable driver's slices only while it runs, and only for its own node, so a node that is
// down would otherwise keep advertising devices nobody can prepare (docs/design/dra.md).

// driverSlices is what the operator observes: the agent pods that run, or may still run, the
// DRA plugin, and the ResourceSlices of Slicer's driver.
type driverSlices struct {
	draAgents []string // namespace/name of the agent pods with the DRA plugin
	count     int      // ResourceSlices of driver migdra.DriverName
}

// sliceAction is what to do about the driver's ResourceSlices.
type sliceAction int

const (
	// slicesNone: there are none.
	slicesNone sliceAction = iota
	// slicesWaitForAgents: a DRA agent still runs (or terminates) and would publish them
	// again, or still serves prepared claims: they stay.
	slicesWaitForAgents
	// slicesDelete: no DRA agent is left; the slices go.
	slicesDelete
)

// planDriverSlices decides from an observation; it is pure.
func planDriverSlices(o driverSlices) sliceAction {
	switch {
	case o.count == 0:
		return slicesNone
	case len(o.draAgents) > 0:
		return slicesWaitForAgents
	default:
		return slicesDelete
	}
}

// observeDriverSlices lists the agent pods of the agent namespace that run the DRA plugin
// and the ResourceSlices of Slicer's driver (both from the manager's cache, which holds
// only the agent namespace's managed pods and only this driver's slices: operator/manager).
func (r *SlicerReconciler) observeDriverSlices(ctx context.Context, o render.Options) (driverSlices, error) {
	var obs driverSlices
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(o.AgentNamespace), client.MatchingLabels(render.AgentPodLabels())); err != nil {
		return obs, fmt.Errorf("list agent pods: %w", err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; render.RunsDRAPlugin(p) {
			obs.draAgents = append(obs.draAgents, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(obs.draAgents)
	var list resourceapi.ResourceSliceList
	if err := r.Client.List(ctx, &list); err != nil {
		return obs, fmt.Errorf("list ResourceSlices: %w", err)
	}
	for _, s := range list.Items {
		if s.Spec.Driver == migdra.DriverName {
			obs.count++
		}
	}
	return obs, nil
}

// deleteDriverSlices deletes every ResourceSlice of Slicer's driver in one call (the field
// selector spec.driver, which the apiserver serves for ResourceSlices).
func (r *SlicerReconciler) deleteDriverSlices(ctx context.Context) error {
	if err := r.Client.DeleteAllOf(ctx, &resourceapi.ResourceSlice{},
		client.MatchingFields{resourceapi.ResourceSliceSelectorDriver: migdra.DriverName}); err != nil {
		return fmt.Errorf("delete the ResourceSlices of driver %s: %w", migdra.DriverName, err)
	}
	return nil
}

// removeDriverSlices observes, decides and deletes the driver's ResourceSlices once no
// agent runs the DRA plugin. It returns what it waits for (empty when nothing is left):
// the DRA agents that still run, or the slices just deleted until the cache sees them go.
func (r *SlicerReconciler) removeDriverSlices(ctx context.Context, o render.Options) ([]string, error) {
	obs, err := r.observeDriverSlices(ctx, o)
	if err != nil {
		return nil, err
	}
	switch planDriverSlices(obs) {
	case slicesWaitForAgents:
		return []string{fmt.Sprintf("%d ResourceSlices of driver %s, kept while the DRA agent pods %v run", obs.count, migdra.DriverName, obs.draAgents)}, nil
	case slicesDelete:
		if err := r.deleteDriverSlices(ctx); err != nil {
			return nil, err
		}
		logf.FromContext(ctx).Info("deleted the ResourceSlices of the DRA driver: no agent runs its plugin", "driver", migdra.DriverName, "slices", obs.count)
		return []string{fmt.Sprintf("%d ResourceSlices of driver %s, deleted", obs.count, migdra.DriverName)}, nil
	}
	return nil, nil
}
