package engine

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// UnrecognizedGPU names each MIG-capable GPU that is no model of the tables, with the reason of
// the first; a GPU without MIG (a T4) is not one Slicer could slice, and is not named.
func TestRenderUnrecognizedGPU(t *testing.T) {
	_, mismatch := mig.ModelForDevice(0x2909, "NVIDIA B200", 172032)
	_, unknown := mig.ModelForDevice(0x232C, "NVIDIA H20-3e", 143771)
	_, t4 := mig.ModelForDevice(0x1EB8, "Tesla T4", 15360)
	gpu := func(i int, migCapable bool, err error) *GPU {
		g := &GPU{Index: i, Healthy: true, MIGSupported: migCapable}
		errors.As(err, &g.Unrecognized)
		return g
	}
	known := &GPU{Index: 0, Model: mig.H100_80GB, MIGSupported: true, Healthy: true}
	for _, tc := range []struct {
		name   string
		gpus   []*GPU
		status metav1.ConditionStatus
		reason string
		names  []string
	}{
		{"all known", []*GPU{known, gpu(1, false, t4)}, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, nil},
		{"memory mismatch first", []*GPU{known, gpu(1, true, mismatch), gpu(2, true, unknown)}, metav1.ConditionTrue,
			slicerv1alpha1.ReasonGPUMemoryMismatch, []string{"GPU 1: ", "not a B200-180GB", "GPU 2: ", "H20-3e"}},
		{"unknown model", []*GPU{gpu(0, true, unknown)}, metav1.ConditionTrue, slicerv1alpha1.ReasonUnknownGPUModel, []string{"is not a MIG model Slicer knows"}},
	} {
		st := renderStatus(slicerv1alpha1.NodeAcceleratorStatus{}, 1, NodeView{Obs: &Observation{GPUs: tc.gpus}}, testNow)
		c := meta.FindStatusCondition(st.Conditions, slicerv1alpha1.ConditionUnrecognizedGPU)
		if c == nil || c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%s: UnrecognizedGPU = %+v, want %s/%s", tc.name, c, tc.status, tc.reason)
			continue
		}
		for _, n := range tc.names {
			if !strings.Contains(c.Message, n) {
				t.Errorf("%s: message %q does not say %q", tc.name, c.Message, n)
			}
		}
		if r := meta.FindStatusCondition(st.Conditions, slicerv1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
			t.Errorf("%s: an unrecognised GPU made the node not Ready: %+v", tc.name, r)
		}
	}
}
