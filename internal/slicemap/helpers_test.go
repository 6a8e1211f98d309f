package slicemap

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// Test builders for the inputs of Build.

const (
	gpu0 = "GPU-11111111-0000-4000-8000-000000000000"
	gpu1 = "GPU-22222222-0000-4000-8000-000000000000"
	mig0 = "MIG-aaaaaaaa-0000-4000-8000-000000000000"
	mig1 = "MIG-bbbbbbbb-0000-4000-8000-000000000000"
)

func nodeAcc(name string, gpus ...slicerv1alpha1.GPUStatus) slicerv1alpha1.NodeAccelerator {
	return slicerv1alpha1.NodeAccelerator{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       slicerv1alpha1.NodeAcceleratorSpec{NodeName: name},
		Status: slicerv1alpha1.NodeAcceleratorStatus{
			Driver: slicerv1alpha1.DriverStateReady, DriverVersion: "550.54.15", GPUs: gpus,
		},
	}
}

func gpu(index int32, uuid, model string, slices ...slicerv1alpha1.MIGSlice) slicerv1alpha1.GPUStatus {
	return slicerv1alpha1.GPUStatus{
		Index: index, UUID: uuid, Model: slicerv1alpha1.GPUModel(model),
		MIGMode: slicerv1alpha1.MIGModeEnabled, Health: slicerv1alpha1.GPUHealthy, Slices: slices,
	}
}

// slice is a realized slice; alloc "" means no allocation reference, else "ns/name".
func slice(profile string, start, size int32, state slicerv1alpha1.SliceState, migUUID string, gi, ci int32, ns, alloc string) slicerv1alpha1.MIGSlice {
	s := slicerv1alpha1.MIGSlice{
		Profile: slicerv1alpha1.MIGProfile(profile), Placement: slicerv1alpha1.Placement{Start: start, Size: size},
		GPUInstanceID: gi, ComputeInstanceID: ci, MIGDeviceUUID: migUUID, State: state,
	}
	if alloc != "" {
		s.Allocation = &slicerv1alpha1.AllocationReference{Namespace: ns, Name: alloc}
	}
	return s
}

func sliceAlloc(ns, name, pod, podUID, node, gpuUUID, profile string, start, size int32, state slicerv1alpha1.AllocationState) slicerv1alpha1.SliceAllocation {
	return slicerv1alpha1.SliceAllocation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: slicerv1alpha1.SliceAllocationSpec{
			PodName: pod, PodUID: podUID, NodeName: node, GPUUUID: gpuUUID,
			Profile: slicerv1alpha1.MIGProfile(profile), Placement: &slicerv1alpha1.Placement{Start: start, Size: size},
		},
		Status: slicerv1alpha1.SliceAllocationStatus{State: state},
	}
}

func pod(ns, name, uid string, phase corev1.PodPhase) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// withMIG adds a request (and the equal limit) of n of a MIG resource to the pod's first
// container.
func withMIG(p corev1.Pod, res string, n int64) corev1.Pod {
	c := &p.Spec.Containers[0]
	if c.Resources.Requests == nil {
		c.Resources.Requests, c.Resources.Limits = corev1.ResourceList{}, corev1.ResourceList{}
	}
	c.Resources.Requests[corev1.ResourceName(res)] = *resource.NewQuantity(n, resource.DecimalSI)
	c.Resources.Limits[corev1.ResourceName(res)] = *resource.NewQuantity(n, resource.DecimalSI)
	return p
}

func unschedulable(p corev1.Pod, message string) corev1.Pod {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message,
	})
	return p
}

// claimSlice is a realized slice held by the claim ns/name (uid, device) in DRA mode.
func claimSlice(profile string, start, size int32, migUUID string, gi int32, ns, name, uid, device string) slicerv1alpha1.MIGSlice {
	s := slice(profile, start, size, allocated, migUUID, gi, 0, "", "")
	s.Claim = &slicerv1alpha1.ClaimReference{Namespace: ns, Name: name, UID: uid, Device: device}
	return s
}

// claim is a ResourceClaim with one request per DeviceClass given, each for one device.
func claim(ns, name, uid string, classes ...string) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	for i, class := range classes {
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name:    "r" + string(rune('0'+i)),
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		})
	}
	return c
}

// allocatedTo allocates devices of Slicer's driver in node's pool to the claim and reserves it
// for pods ("name/uid").
func allocatedTo(c resourceapi.ResourceClaim, node string, devices []string, pods ...string) resourceapi.ResourceClaim {
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for i, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "r" + string(rune('0'+i)), Driver: migdra.DriverName, Pool: node, Device: d,
		})
	}
	for _, p := range pods {
		name, uid, _ := strings.Cut(p, "/")
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: name, UID: types.UID(uid)})
	}
	return c
}

// withClaim adds a pod-level claim: a ResourceClaim by name, or with template set a template.
func withClaim(p corev1.Pod, podClaim, name string, template bool) corev1.Pod {
	pc := corev1.PodResourceClaim{Name: podClaim}
	if template {
		pc.ResourceClaimTemplateName = &name
	} else {
		pc.ResourceClaimName = &name
	}
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, pc)
	return p
}
