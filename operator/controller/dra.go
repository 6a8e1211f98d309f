package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/operator/render"
)

// The DRA frontend's RBAC: the DeviceClasses, the dry-run ResourceSlice of the
// partitionable-devices probe, and the deletion of the driver's ResourceSlices once no agent
// runs the DRA plugin (dra_slices.go; the agent's slice writes are granted to it, so the
// operator holds them too).
//
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=get;list;watch;create;update;delete;deletecollection

// reconcileDRA runs the DRA frontend: the device-plugin frontend's objects go, the webhook
// and scheduler conditions say they are not used, the apiserver is probed for partitionable
// devices, and one DeviceClass per profile of the cluster's GPU models (node labels and
// NodeAccelerators, clusterGPUModels) is applied, the classes of other profiles deleted. It reports whether the agent may roll out.
func (r *SlicerReconciler) reconcileDRA(ctx context.Context, o render.Options, st *status, res *result, apply applyFunc) bool {
	const cond = slicerv1alpha1.ConditionDeviceClassesReady
	const notUsed = "spec.frontend is DRA: pods get their slices through DeviceClasses and the stock kube-scheduler, "
	if err := r.removeAll(ctx, render.DevicePluginFrontend(o, r.Admission)); err != nil {
		res.fail(fmt.Errorf("remove the device-plugin frontend: %w", err))
	}
	st.set(slicerv1alpha1.ConditionWebhookAvailable, metav1.ConditionTrue, slicerv1alpha1.ReasonNotUsed, notUsed+"with no webhook")
	st.set(slicerv1alpha1.ConditionSchedulerAvailable, metav1.ConditionTrue, slicerv1alpha1.ReasonNotUsed, notUsed+"not Slicer's scheduler")

	served, err := r.partitionableServed(ctx)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return false
	}
	if !served {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonPartitionableDevicesOff, fmt.Sprintf(
			"the apiserver (Kubernetes %s) does not serve DRA partitionable devices: it drops the counters that keep MIG placements apart, "+
				"so the stock allocator could hand out overlapping slices and Slicer publishes none. Enable the DRAPartitionableDevices feature gate "+
				"(on by default from Kubernetes 1.36) on the apiserver, the scheduler and the kubelets, or set spec.frontend to DevicePlugin", o.Kubernetes.GitVersion))
		return false
	}
	models, err := r.gpuModels(ctx)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return false
	}
	profiles, unknown := render.ProfilesOfModels(models)
	classes, err := render.DeviceClasses(profiles)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return false
	}
	if !apply("deviceclasses", classes) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "DeviceClasses could not be applied")
		return true
	}
	if err := r.removeAll(ctx, staleClasses(classes)); err != nil {
		res.fail(fmt.Errorf("remove DeviceClasses of profiles no GPU offers: %w", err))
	}
	msg := fmt.Sprintf("%d DeviceClasses for the MIG profiles of %s and for whole GPUs", len(classes), strings.Join(models, ", "))
	if len(models) == 0 {
		msg = "the DeviceClass of whole GPUs; no node is labelled " + slicerv1alpha1.LabelGPUModel + " and no NodeAccelerator reports a GPU model yet, so no class of a MIG profile is needed"
	}
	if len(unknown) > 0 {
		msg += fmt.Sprintf("; GPU models Slicer does not know get none: %s", strings.Join(unknown, ", "))
	}
	if len(classes) > 0 && !r.bridgeServed(ctx, classes[0]) {
		msg += "; the apiserver dropped extendedResourceName (the extended-resource bridge is off), so pods must ask through ResourceClaims, not nvidia.com/mig-<profile>"
	}
	st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonApplied, msg)
	return true
}

// removeDRA deletes the DeviceClasses, and the driver's ResourceSlices once no agent runs
// the DRA plugin, and drops the condition: the device-plugin frontend.
func (r *SlicerReconciler) removeDRA(ctx context.Context, o render.Options, st *status, res *result) {
	if err := r.removeAll(ctx, render.AllDeviceClasses()); err != nil {
		res.fail(fmt.Errorf("remove DeviceClasses: %w", err))
	}
	// While a DRA agent runs, its slices stay; its pod's deletion reconciles again.
	if _, err := r.removeDriverSlices(ctx, o); err != nil {
		res.fail(err)
	}
	st.remove(slicerv1alpha1.ConditionDeviceClassesReady)
}

// partitionableServed creates migdra's probe slice with server-side dry run (nothing is
// stored) and reports whether the counter consumption came back.
func (r *SlicerReconciler) partitionableServed(ctx context.Context) (bool, error) {
	probe := migdra.PartitionableProbe("slicer-probe")
	probe.Name = "slicer-partitionable-probe"
	probe.GenerateName = ""
	if err := r.Client.Create(ctx, probe, client.DryRunAll); err != nil {
		return false, fmt.Errorf("probe for DRA partitionable devices (dry-run ResourceSlice): %w", err)
	}
	return migdra.PartitionableServed(probe), nil
}

// bridgeServed reports whether the applied class kept its extendedResourceName.
func (r *SlicerReconciler) bridgeServed(ctx context.Context, applied client.Object) bool {
	var c resourceapi.DeviceClass
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(applied), &c); err != nil {
		return true // unknown: say nothing
	}
	return c.Spec.ExtendedResourceName != nil
}

// gpuModels observes the GPU models of the cluster: the nodes' slicer.dev/gpu-model labels
// and the NodeAccelerators' GPUs (clusterGPUModels).
func (r *SlicerReconciler) gpuModels(ctx context.Context) ([]string, error) {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.HasLabels{slicerv1alpha1.LabelGPUModel}); err != nil {
		return nil, fmt.Errorf("list GPU nodes: %w", err)
	}
	labels := make([]string, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		labels = append(labels, n.Labels[slicerv1alpha1.LabelGPUModel])
	}
	accels, err := r.observeAccelerators(ctx)
	if err != nil {
		return nil, err
	}
	return clusterGPUModels(labels, accels), nil
}

// staleClasses are the classes of every known profile but the wanted ones.
func staleClasses(want []client.Object) []client.Object {
	keep := map[string]bool{}
	for _, c := range want {
		keep[c.GetName()] = true
	}
	var out []client.Object
	for _, c := range render.AllDeviceClasses() {
		if !keep[c.GetName()] {
			out = append(out, c)
		}
	}
	return out
}
