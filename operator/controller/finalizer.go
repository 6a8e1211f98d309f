package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/render"
)

// cleanupTargets are the objects the teardown deletes explicitly (teardownSteps): every
// cluster-scoped one, plus the Module (KMM unloads the driver on deletion),
// the dashboards in openshift-config-managed and the agent's DaemonSet (its
// pods must be gone before the driver is unloaded and before the DRA driver's
// ResourceSlices go, even when it shares the operator's namespace). Other
// namespaced objects in the operator's namespaces go by owner reference
// (garbage collection).
func (r *SlicerReconciler) cleanupTargets(o render.Options) []client.Object {
	objs := render.RBAC(o)
	// Without a scheduler build RBAC leaves the scheduler's roles out; they
	// and the webhook registration are in Removed then.
	objs = append(objs, render.Removed(o)...)
	objs = append(objs, render.AgentNamespace(o))
	objs = append(objs, render.AllDeviceClasses()...)
	if rule, err := render.NodeFeatureRule(o); err == nil {
		objs = append(objs, rule)
	}
	if m, err := render.Module(o); err == nil {
		objs = append(objs, m)
	}
	if r.Admission != nil {
		if adm, err := render.WebhookAdmission(o, r.Admission); err == nil {
			objs = append(objs, adm...)
		}
	}
	o.Platform.OpenShift = true
	objs = append(objs, render.Dashboards(o)...)
	var out []client.Object
	for _, obj := range objs {
		if obj.GetNamespace() == "" || obj.GetNamespace() == render.OpenShiftDashboardNamespace ||
			obj.GetObjectKind().GroupVersionKind().Kind == "Module" {
			out = append(out, obj)
		}
	}
	return append(out, &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: render.AgentName, Namespace: o.AgentNamespace},
	})
}

// finalize runs the teardown steps in order (teardownSteps) and removes the finalizer once
// all are done, or once DeletionTimeout has passed since the last untimed step finished
// (then with a Degraded condition and a Warning Event, so a stuck object cannot block
// forever). An untimed step (the release of the slices) is never cut short: it holds the
// deletion, with the SlicesReleased condition saying why, until it is done.
func (r *SlicerReconciler) finalize(ctx context.Context, s *slicerv1alpha1.Slicer, o render.Options) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	if !controllerutil.ContainsFinalizer(s, Finalizer) {
		return ctrl.Result{}, nil
	}
	before := s.Status.DeepCopy()
	var pending []string
	var stepErr error
	step := ""
	untimed := false
	// notRun are the steps after the one that waits: a timeout leaves them undone.
	var notRun []string
	steps := r.teardownSteps(s, o)
	for i, st := range steps {
		pending, stepErr = st.run(ctx)
		if stepErr != nil {
			stepErr = fmt.Errorf("uninstall step %q: %w", st.name, stepErr)
		}
		if len(pending) > 0 || stepErr != nil {
			step, untimed = st.name, st.untimed
			for _, later := range steps[i+1:] {
				notRun = append(notRun, later.name)
			}
			break
		}
	}
	if !equality.Semantic.DeepEqual(*before, s.Status) {
		if err := r.Client.Status().Update(ctx, s); err != nil {
			return ctrl.Result{}, errors.Join(stepErr, fmt.Errorf("record the release of the slices: %w", err))
		}
	}
	if len(pending) > 0 || stepErr != nil {
		timeout := orDefault(r.DeletionTimeout, DefaultDeletionTimeout)
		if untimed || r.now().Sub(timedSince(s)) < timeout {
			if stepErr != nil {
				return ctrl.Result{}, stepErr
			}
			log.Info("waiting for cleanup", "step", step, "pending", pending)
			return ctrl.Result{RequeueAfter: pollAfter(r.now().Sub(timedSince(s)), timeout)}, nil
		}
		msg := fmt.Sprintf("cleanup did not finish within %s at step %q; left: %v; errors: %v; steps not run: %v (docs/uninstall.md)", timeout, step, pending, stepErr, notRun)
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
			Type: slicerv1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: slicerv1alpha1.ReasonDeletionTimedOut,
			Message: truncate(msg), ObservedGeneration: s.Generation,
		})
		if err := r.Client.Status().Update(ctx, s); err != nil {
			return ctrl.Result{}, fmt.Errorf("record deletion timeout: %w", err)
		}
		if r.Recorder != nil {
			r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, slicerv1alpha1.ReasonDeletionTimedOut, "Cleanup", "%s", truncate(msg))
		}
		log.Info("cleanup timed out; removing the finalizer", "step", step, "pending", pending)
	}
	controllerutil.RemoveFinalizer(s, Finalizer)
	if err := r.Client.Update(ctx, s); err != nil {
		return ctrl.Result{}, fmt.Errorf("remove finalizer: %w", err)
	}
	return ctrl.Result{}, nil
}

// pollAfter is how long a teardown step that waits is left before it is looked at again: a
// quarter of the time since the cleanup (or its timed part) began, at least a second and at most
// a twentieth of the timeout. Some steps wait on objects the controller does not watch (agent
// pods, ResourceSlices), so only the poll sees them go: a step that ends in seconds is seen in
// seconds, one that takes minutes costs few polls (6 s apart with the default two minutes).
func pollAfter(elapsed, timeout time.Duration) time.Duration {
	return min(max(elapsed/4, time.Second), timeout/20)
}

// timedSince is when the cleanup timeout starts: the deletion, or the release of the
// slices when the deletion waited for it (SlicesReleased turned True).
func timedSince(s *slicerv1alpha1.Slicer) time.Time {
	since := s.DeletionTimestamp.Time
	if c := meta.FindStatusCondition(s.Status.Conditions, slicerv1alpha1.ConditionSlicesReleased); c != nil &&
		c.Status == metav1.ConditionTrue && c.LastTransitionTime.After(since) {
		since = c.LastTransitionTime.Time
	}
	return since
}

// deleteAndCheck deletes obj if it exists and reports whether it is gone. A
// Namespace counts as gone once it is terminating (its contents are the
// namespace controller's business). Kinds whose CRD is not served are gone.
func (r *SlicerReconciler) deleteAndCheck(ctx context.Context, obj client.Object) (bool, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	key := client.ObjectKeyFromObject(obj)
	if err := r.Client.Get(ctx, key, u); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return true, nil
		}
		return false, fmt.Errorf("read %s %s: %w", u.GetKind(), key, err)
	}
	if !ownedBySlicer(u) {
		// Not ours (same name, created by someone else): leave it.
		return true, nil
	}
	if u.GetDeletionTimestamp() != nil {
		return u.GetKind() == "Namespace", nil
	}
	if err := r.Client.Delete(ctx, u, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("delete %s %s: %w", u.GetKind(), key, err)
	}
	return u.GetKind() == "Namespace", nil
}

func ownedBySlicer(obj metav1.Object) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind == "Slicer" && ref.APIVersion == slicerv1alpha1.GroupVersion.String() && ref.Name == slicerv1alpha1.SlicerName {
			return true
		}
	}
	return false
}
