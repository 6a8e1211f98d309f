package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

const testGPU = "GPU-0"

func h100(slices ...Slice) *Observation {
	return &Observation{GPUs: []*GPU{{UUID: testGPU, Model: mig.H100_80GB, MIGSupported: true, MIGMode: nvml.MIGEnabled, Healthy: true, Slices: slices}}}
}

func slot(gpu, prof string, start, size int) mig.Slot {
	return mig.Slot{GPU: gpu, Profile: prof, Placement: mig.Placement{Start: start, Size: size}}
}

// claimNode is two GPUs: an H100 in MIG mode with a claimed and an unclaimed instance, and
// an unhealthy H100 with MIG mode off.
func claimNode() (*Observation, func(*GPU, Slice) (slicerv1alpha1.ClaimReference, bool)) {
	obs := h100(
		Slice{Slot: slot(testGPU, "3g.40gb", 4, 4), GI: 2, CI: 0, MIGUUID: "MIG-held"},
		Slice{Slot: slot(testGPU, "1g.10gb", 0, 1), GI: 9, CI: 0, MIGUUID: "MIG-orphan"},
	)
	obs.DriverVersion = "580.1"
	obs.GPUs[0].ProductName, obs.GPUs[0].MemoryMiB = "NVIDIA H100 80GB HBM3", 81559
	obs.GPUs = append(obs.GPUs, &GPU{Index: 1, UUID: "GPU-1", Model: mig.H100_80GB, MIGSupported: true, MIGMode: nvml.MIGDisabled})
	claim := func(g *GPU, s Slice) (slicerv1alpha1.ClaimReference, bool) {
		if s.MIGUUID != "MIG-held" {
			return slicerv1alpha1.ClaimReference{}, false
		}
		return slicerv1alpha1.ClaimReference{Namespace: "ns", Name: "c", UID: "uid-c", Device: "gpu-0-3g-40gb-at-4"}, true
	}
	return obs, claim
}

// A DRA node's status: the slice a claim holds is Allocated with exactly that claim, the
// other Orphaned with no holder; GPUs, health, MIG mode and conditions as the device-plugin
// frontend renders them.
func TestRenderClaimView(t *testing.T) {
	obs, claim := claimNode()
	st := renderStatus(slicerv1alpha1.NodeAcceleratorStatus{}, 3, ClaimView{Emulated: true, Obs: obs, Claim: claim}.NodeView(), testNow)
	want := []slicerv1alpha1.GPUStatus{{
		Index: 0, UUID: testGPU, Model: "H100-80GB", ProductName: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
		MIGMode: slicerv1alpha1.MIGModeEnabled, Mode: slicerv1alpha1.GPUModeMIG, Health: slicerv1alpha1.GPUHealthy,
		Slices: []slicerv1alpha1.MIGSlice{
			{Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 4, Size: 4}, GPUInstanceID: 2, MIGDeviceUUID: "MIG-held",
				State: slicerv1alpha1.SliceAllocated, Claim: &slicerv1alpha1.ClaimReference{Namespace: "ns", Name: "c", UID: "uid-c", Device: "gpu-0-3g-40gb-at-4"}},
			{Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 1}, GPUInstanceID: 9, MIGDeviceUUID: "MIG-orphan",
				State: slicerv1alpha1.SliceOrphaned},
		},
	}, {
		Index: 1, UUID: "GPU-1", Model: "H100-80GB", MIGMode: slicerv1alpha1.MIGModeDisabled, Mode: slicerv1alpha1.GPUModeWhole,
		Health: slicerv1alpha1.GPUUnhealthy, HealthMessage: "GPU 1 is unhealthy",
	}}
	if diff := cmp.Diff(want, st.GPUs); diff != "" {
		t.Fatalf("GPUs (-want +got):\n%s", diff)
	}
	if st.Driver != slicerv1alpha1.DriverStateEmulated || st.DriverVersion != "580.1" {
		t.Fatalf("driver %q %q", st.Driver, st.DriverVersion)
	}
	for typ, want := range map[string]metav1.ConditionStatus{
		slicerv1alpha1.ConditionReady: metav1.ConditionTrue, slicerv1alpha1.ConditionDriverNotReady: metav1.ConditionFalse,
		slicerv1alpha1.ConditionMIGDisabled: metav1.ConditionTrue, slicerv1alpha1.ConditionOwnershipConflict: metav1.ConditionFalse,
	} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || c.Status != want || c.ObservedGeneration != 3 {
			t.Errorf("condition %s = %+v, want %s", typ, c, want)
		}
	}
}

// Ready is False while the kubelet plugin does not serve, and while NVML is unusable (which
// also empties the GPUs and says so in DriverNotReady).
func TestRenderClaimViewNotReady(t *testing.T) {
	obs, claim := claimNode()
	cases := []struct {
		name   string
		v      ClaimView
		reason string
		gpus   int
	}{
		{"plugin not started", ClaimView{Obs: obs, Claim: claim, NotServing: errors.New("the kubelet plugin is not started")}, slicerv1alpha1.ReasonPluginNotServing, 2},
		{"NVML unusable", ClaimView{DriverErr: errors.New("no driver"), NotServing: errors.New("not started")}, slicerv1alpha1.ReasonNVMLUnavailable, 0},
		{"another device plugin", ClaimView{Obs: obs, Claim: claim, Conflict: foreignPlugin}, slicerv1alpha1.ReasonForeignDevicePlugin, 2},
	}
	for _, tc := range cases {
		st := renderStatus(slicerv1alpha1.NodeAcceleratorStatus{}, 1, tc.v.NodeView(), testNow)
		c := meta.FindStatusCondition(st.Conditions, slicerv1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason {
			t.Errorf("%s: Ready = %+v, want False/%s", tc.name, c, tc.reason)
		}
		if len(st.GPUs) != tc.gpus {
			t.Errorf("%s: %d GPUs, want %d", tc.name, len(st.GPUs), tc.gpus)
		}
	}
}

var foreignPlugin = migapi.Foreign{Reason: slicerv1alpha1.ReasonForeignDevicePlugin, Message: "another device plugin advertises nvidia.com/gpu"}

// OwnershipConflict carries the reason and message of the other owner, as found, and is False
// with none.
func TestRenderOwnershipConflict(t *testing.T) {
	obs, claim := claimNode()
	st := renderStatus(slicerv1alpha1.NodeAcceleratorStatus{}, 1, ClaimView{Obs: obs, Claim: claim, Conflict: foreignPlugin}.NodeView(), testNow)
	c := meta.FindStatusCondition(st.Conditions, slicerv1alpha1.ConditionOwnershipConflict)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != foreignPlugin.Reason || c.Message != foreignPlugin.Message {
		t.Fatalf("OwnershipConflict = %+v, want True/%s/%q", c, foreignPlugin.Reason, foreignPlugin.Message)
	}
	st = renderStatus(st, 2, ClaimView{Obs: obs, Claim: claim}.NodeView(), testNow)
	if c := meta.FindStatusCondition(st.Conditions, slicerv1alpha1.ConditionOwnershipConflict); c == nil || c.Status != metav1.ConditionFalse || c.Reason != slicerv1alpha1.ReasonAsExpected {
		t.Fatalf("OwnershipConflict once the other owner is gone = %+v", c)
	}
}

// RuntimeBypass is True with what was found, Unknown when the RuntimeClasses could not be
// read, False otherwise; it does not make the node un-Ready (it is reported, not acted on).
func TestRenderRuntimeBypass(t *testing.T) {
	obs, claim := claimNode()
	found := migapi.Bypass{Reason: slicerv1alpha1.ReasonNVIDIARuntimeClass, Message: "RuntimeClass nvidia (handler nvidia) selects ..."}
	for _, tc := range []struct {
		name   string
		bypass migapi.Bypass
		status metav1.ConditionStatus
		reason string
	}{
		{name: "found", bypass: found, status: metav1.ConditionTrue, reason: slicerv1alpha1.ReasonNVIDIARuntimeClass},
		{name: "unreadable", bypass: RuntimeBypass(nil, nil, errors.New("forbidden")), status: metav1.ConditionUnknown, reason: slicerv1alpha1.ReasonRuntimeClassesUnreadable},
		{name: "none", bypass: RuntimeBypass(nil, nil, nil), status: metav1.ConditionFalse, reason: slicerv1alpha1.ReasonAsExpected},
	} {
		st := renderStatus(slicerv1alpha1.NodeAcceleratorStatus{}, 1, ClaimView{Obs: obs, Claim: claim, Bypass: tc.bypass}.NodeView(), testNow)
		c := meta.FindStatusCondition(st.Conditions, slicerv1alpha1.ConditionRuntimeBypass)
		if c == nil || c.Status != tc.status || c.Reason != tc.reason || c.Message == "" {
			t.Errorf("%s: RuntimeBypass = %+v, want %s/%s", tc.name, c, tc.status, tc.reason)
		}
		if r := meta.FindStatusCondition(st.Conditions, slicerv1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
			t.Errorf("%s: Ready = %+v, want True", tc.name, r)
		}
	}
}

// StatusWriter creates the node's NodeAccelerator and writes the claim view into it; a
// second identical publish writes nothing.
func TestStatusWriterPublishesClaims(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := slicerv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&slicerv1alpha1.NodeAccelerator{}).Build()
	w := NewStatusWriter(c, nil, "n1", -1, nil)
	obs, claim := claimNode()
	ctx := context.Background()
	if _, err := w.Publish(ctx, ClaimView{Obs: obs, Claim: claim}.NodeView()); err != nil {
		t.Fatal(err)
	}
	var na slicerv1alpha1.NodeAccelerator
	if err := c.Get(ctx, types.NamespacedName{Name: "n1"}, &na); err != nil {
		t.Fatal(err)
	}
	if s := na.Status.GPUs[0].Slices[0]; s.Claim == nil || s.Claim.UID != "uid-c" || s.State != slicerv1alpha1.SliceAllocated {
		t.Fatalf("claimed slice %+v", s)
	}
	rv := na.ResourceVersion
	if _, err := w.Publish(ctx, ClaimView{Obs: obs, Claim: claim}.NodeView()); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "n1"}, &na); err != nil || na.ResourceVersion != rv {
		t.Fatalf("an unchanged status was written again: %v, rv %s then %s", err, rv, na.ResourceVersion)
	}
}
