package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/operator/render"
)

// teardownStep is one step of the uninstall. run does the step's writes and returns what
// is still pending (nothing pending: the step is done and the next one runs).
type teardownStep struct {
	name string
	run  func(ctx context.Context) ([]string, error)
	// untimed steps wait as long as they must (the pods are the user's); the cleanup
	// timeout counts only from the end of the last untimed step.
	untimed bool
}

// teardownSteps is the uninstall, in order: a step runs only once every step before it is
// done, so a step is inserted here, at its place (docs/uninstall.md lists the same order).
//
//  1. slices: no pod may hold a MIG slice (Wait), or the scheduler and then the pods that
//     hold slices are deleted and the agents release every allocation (Force); see
//     releaseSlices. The agents must still run: only they may remove their finalizer
//     (the allocation guard) and destroy the instances.
//  2. agents: the agent's DaemonSet, and the step waits until its pods are gone.
//  3. driver: the KMM Module (KMM unloads the driver with pods in the agent's namespace,
//     which a terminating namespace would refuse, so it goes before the namespace).
//  4. components: every other cleanup target (RBAC, admission, the agent's namespace,
//     NodeFeatureRule, DeviceClasses, dashboards); the rest goes by owner reference.
//  5. NodeAccelerators: every node's, which its agent created and no agent updates any more
//     (left, a stale Ready one would count in a later install's status until its agent ran).
//  6. DRA ResourceSlices, once no agent pod runs the DRA plugin.
//  7. GPU operator labels: the NVIDIA GPU operator's deploy labels on Slicer's nodes put back
//     as they were before Slicer (gpuoperator.go).
//  8. driver upgrade labels: the upgrade's step label and annotation and KMM's module-version
//     label of Slicer's Module, off every node, once the Module is gone (driverupgrade.go).
func (r *SlicerReconciler) teardownSteps(s *slicerv1alpha1.Slicer, o render.Options) []teardownStep {
	agents, driver, rest := splitTargets(r.cleanupTargets(o))
	return []teardownStep{
		{name: "slices", untimed: true, run: func(ctx context.Context) ([]string, error) { return r.releaseSlices(ctx, s, o) }},
		{name: "agents", run: func(ctx context.Context) ([]string, error) {
			pending, err := r.deleteAll(ctx, agents)
			if err != nil || len(pending) > 0 {
				return pending, err
			}
			return r.componentPodsLeft(ctx, r.Client, o.AgentNamespace, render.ComponentAgent)
		}},
		{name: "driver", run: func(ctx context.Context) ([]string, error) { return r.deleteAll(ctx, driver) }},
		{name: "components", run: func(ctx context.Context) ([]string, error) { return r.deleteAll(ctx, rest) }},
		{name: "NodeAccelerators", run: r.deleteNodeAccelerators},
		{name: "DRA ResourceSlices", run: func(ctx context.Context) ([]string, error) { return r.removeDriverSlices(ctx, o) }},
		{name: "GPU operator labels", run: func(ctx context.Context) ([]string, error) { return nil, r.restoreGPUOperatorLabels(ctx) }},
		{name: "driver upgrade labels", run: func(ctx context.Context) ([]string, error) { return nil, r.removeUpgradeLabels(ctx, o) }},
	}
}

// splitTargets sorts the cleanup targets into the agent's DaemonSet, the KMM Modules and
// the rest.
func splitTargets(objs []client.Object) (agents, driver, rest []client.Object) {
	for _, obj := range objs {
		switch obj.GetObjectKind().GroupVersionKind().Kind {
		case "DaemonSet":
			agents = append(agents, obj)
		case "Module":
			driver = append(driver, obj)
		default:
			rest = append(rest, obj)
		}
	}
	return agents, driver, rest
}

// deleteAll deletes the objects and lists those not gone yet.
func (r *SlicerReconciler) deleteAll(ctx context.Context, objs []client.Object) ([]string, error) {
	var pending []string
	for _, obj := range objs {
		gone, err := r.deleteAndCheck(ctx, obj)
		if err != nil {
			return pending, err
		}
		if !gone {
			pending = append(pending, obj.GetObjectKind().GroupVersionKind().Kind+" "+client.ObjectKeyFromObject(obj).String())
		}
	}
	return pending, nil
}

// deleteNodeAccelerators deletes every NodeAccelerator and lists those not gone yet. It runs
// after the agents are gone, so none is created again.
func (r *SlicerReconciler) deleteNodeAccelerators(ctx context.Context) ([]string, error) {
	var list slicerv1alpha1.NodeAcceleratorList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list NodeAccelerators: %w", err)
	}
	var pending []string
	for i := range list.Items {
		na := &list.Items[i]
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, na)); err != nil {
			return pending, fmt.Errorf("delete NodeAccelerator %s: %w", na.Name, err)
		}
		pending = append(pending, "NodeAccelerator "+na.Name)
	}
	return pending, nil
}

// componentPodsLeft lists the pods of a component that still run in namespace.
func (r *SlicerReconciler) componentPodsLeft(ctx context.Context, c client.Reader, namespace, component string) ([]string, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels(render.ComponentPodLabels(component))); err != nil {
		return nil, fmt.Errorf("list %s pods: %w", component, err)
	}
	var left []string
	for i := range pods.Items {
		left = append(left, "Pod "+client.ObjectKeyFromObject(&pods.Items[i]).String())
	}
	return left, nil
}

func (r *SlicerReconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// releaseSlices is the first teardown step: observe the allocations and their pods, decide
// (decideRelease), then write: stop the scheduler, delete the holder pods, and record the
// SlicesReleased condition on s (finalize writes the status).
func (r *SlicerReconciler) releaseSlices(ctx context.Context, s *slicerv1alpha1.Slicer, o render.Options) ([]string, error) {
	f, err := r.observeRelease(ctx, s, o)
	if err != nil {
		return nil, err
	}
	d := decideRelease(f)
	setReleased(s, d)
	if d.Done {
		return nil, nil
	}
	log := logf.FromContext(ctx)
	if d.StopAllocators {
		scheduler := &appsv1.Deployment{
			TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: render.SchedulerName, Namespace: o.Namespace},
		}
		if _, err := r.deleteAndCheck(ctx, scheduler); err != nil {
			return nil, fmt.Errorf("stop the scheduler: %w", err)
		}
		if _, err := r.deleteAll(ctx, render.AllDeviceClasses()); err != nil {
			return nil, fmt.Errorf("remove the DeviceClasses: %w", err)
		}
	}
	for _, h := range d.DeletePods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.Pod.Namespace, Name: h.Pod.Name}}
		// The UID precondition: a pod recreated under the same name holds no slice.
		err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &h.UID})
		switch {
		case err == nil:
			log.Info("uninstall: deleted a pod that holds MIG slices", "pod", h.Pod, "slices", h.Slices)
		case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
			return nil, fmt.Errorf("delete pod %s holding %d MIG slices: %w", h.Pod, h.Slices, err)
		}
	}
	return []string{d.Message}, nil
}

// observeRelease reads the allocations and the DRA driver's claims, whether the scheduler
// or a DeviceClass is still there (Force only), and the holder pods (Force only; uncached:
// the operator's cache holds only its own pods).
func (r *SlicerReconciler) observeRelease(ctx context.Context, s *slicerv1alpha1.Slicer, o render.Options) (releaseFacts, error) {
	f := releaseFacts{Policy: s.Spec.Uninstall.Policy}
	var allocs slicerv1alpha1.SliceAllocationList
	switch err := r.Client.List(ctx, &allocs); {
	case meta.IsNoMatchError(err):
	case err != nil:
		return f, fmt.Errorf("list SliceAllocations: %w", err)
	}
	byAllocation, releasing := holdersOf(allocs.Items)
	var claims resourceapi.ResourceClaimList
	switch err := r.apiReader().List(ctx, &claims); {
	case meta.IsNoMatchError(err):
	case err != nil:
		return f, fmt.Errorf("list ResourceClaims: %w", err)
	}
	byClaim, releasingClaims := claimHolders(claims.Items, migdra.DriverName)
	f.Holders, f.Releasing, f.ReleasingClaims = mergeHolders(byAllocation, byClaim), releasing, releasingClaims
	if f.Policy != slicerv1alpha1.UninstallForce || (len(f.Holders) == 0 && f.Releasing == 0 && f.ReleasingClaims == 0) {
		return f, nil
	}
	gone, err := r.allocatorsGone(ctx, o)
	if err != nil {
		return f, err
	}
	f.AllocatorsGone = gone
	for i := range f.Holders {
		h := &f.Holders[i]
		var pod corev1.Pod
		err := r.apiReader().Get(ctx, h.Pod, &pod)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return f, fmt.Errorf("read pod %s: %w", h.Pod, err)
		}
		h.Exists = pod.UID == h.UID
		h.Deleting = pod.DeletionTimestamp != nil
	}
	return f, nil
}

// allocatorsGone reports whether nothing hands out new slices any more: the scheduler's
// Deployment and pods are gone, and no DeviceClass of Slicer's is left (a class of that name
// someone else owns is theirs: deleteAndCheck leaves it, and so does this).
func (r *SlicerReconciler) allocatorsGone(ctx context.Context, o render.Options) (bool, error) {
	var d appsv1.Deployment
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: render.SchedulerName}, &d); {
	case err == nil:
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("read the scheduler Deployment: %w", err)
	}
	left, err := r.componentPodsLeft(ctx, r.apiReader(), o.Namespace, render.ComponentScheduler)
	if err != nil || len(left) > 0 {
		return false, err
	}
	for _, c := range render.AllDeviceClasses() {
		var class resourceapi.DeviceClass
		switch err := r.apiReader().Get(ctx, client.ObjectKeyFromObject(c), &class); {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		case err != nil:
			return false, fmt.Errorf("read DeviceClass %s: %w", c.GetName(), err)
		case ownedBySlicer(&class):
			return false, nil
		}
	}
	return true, nil
}

// setReleased records the SlicesReleased condition: False while the step waits, True once
// done. A deletion that never waited gets none.
func setReleased(s *slicerv1alpha1.Slicer, d releaseDecision) {
	status := metav1.ConditionFalse
	if d.Done {
		if meta.FindStatusCondition(s.Status.Conditions, slicerv1alpha1.ConditionSlicesReleased) == nil {
			return
		}
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
		Type: slicerv1alpha1.ConditionSlicesReleased, Status: status, Reason: d.Reason,
		Message: truncate(d.Message), ObservedGeneration: s.Generation,
	})
}
