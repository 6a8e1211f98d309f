package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/kubeversion"
	"github.com/slicer-operator/slicer/operator/render"
)

// observeVersion asks the apiserver for its version (GET /version). It runs
// on every reconcile, like the API group discovery: one small uncached
// request, so a reconcile always renders for the apiserver it talks to.
func (r *SlicerReconciler) observeVersion() (kubeversion.Version, error) {
	src := r.ServerVersion
	if src == nil {
		src = r.Discovery
	}
	info, err := src.ServerVersion()
	if err != nil {
		return kubeversion.Version{}, fmt.Errorf("discover the apiserver version: %w", err)
	}
	v, err := kubeversion.Parse(info)
	if err != nil {
		return kubeversion.Version{}, fmt.Errorf("discover the apiserver version: %w", err)
	}
	return v, nil
}

// reconcileVersion sets the version condition and schedules the next look
// at the version: an apiserver upgrade raises no event the operator
// watches, so without it the scheduler build would only follow at the next
// unrelated reconcile. It reports whether the minor has a scheduler build.
func (r *SlicerReconciler) reconcileVersion(o render.Options, st *status, res *result) bool {
	const cond = slicerv1alpha1.ConditionKubernetesVersionSupported
	res.requeueAfter(orDefault(r.VersionRecheck, DefaultVersionRecheck))
	if !render.SchedulerSupported(o) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonUnsupportedKubernetesVersion,
			render.UnsupportedMessage(o)+"; pods that ask for MIG slices are rejected at admission until the cluster runs a supported minor")
		return false
	}
	image, err := render.SchedulerImage(o)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return true
	}
	st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected,
		fmt.Sprintf("Kubernetes %s: scheduler build for %s (%s)", o.Kubernetes.GitVersion, o.Kubernetes.Minor, image))
	return true
}

// removeScheduler deletes the scheduler and the webhook registration that
// would send pods to it (render.Removed), once the policy rejecting MIG
// pods is applied (admitted), so that no pod is ever admitted for a
// scheduler that is gone.
func (r *SlicerReconciler) removeScheduler(ctx context.Context, o render.Options, st *status, res *result, admitted bool) {
	const cond = slicerv1alpha1.ConditionSchedulerAvailable
	msg := render.UnsupportedMessage(o)
	if !admitted {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonUnsupportedKubernetesVersion, msg+"; the scheduler is removed once MIG pods are rejected at admission")
		return
	}
	if err := r.removeAll(ctx, render.Removed(o)); err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return
	}
	st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonUnsupportedKubernetesVersion, msg)
}

// removeAll deletes the objects of objs that exist, in order. Only the
// operator's own objects are seen: the cache holds the managed ones only.
func (r *SlicerReconciler) removeAll(ctx context.Context, objs []client.Object) error {
	log := logf.FromContext(ctx)
	for _, want := range objs {
		live, ok := want.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("%T is not a client.Object", want)
		}
		key := client.ObjectKeyFromObject(want)
		kind := want.GetObjectKind().GroupVersionKind().Kind
		if err := r.Client.Get(ctx, key, live); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("read %s %s: %w", kind, key, err)
		}
		if !live.GetDeletionTimestamp().IsZero() {
			continue
		}
		if err := r.Client.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: ptr.To(live.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", kind, key, err)
		}
		log.Info("removed object", "kind", kind, "object", key)
	}
	return nil
}
