package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/render"
)

// The driver's ResourceSlices go only when none is left to serve: never while an agent
// runs the DRA plugin, and no write when there are none.
func TestPlanDriverSlices(t *testing.T) {
	for _, tc := range []struct {
		name string
		obs  driverSlices
		want sliceAction
	}{
		{"nothing published", driverSlices{}, slicesNone},
		{"nothing published, DRA agent running", driverSlices{draAgents: []string{"ns/agent-a"}}, slicesNone},
		{"slices and a DRA agent running or terminating", driverSlices{draAgents: []string{"ns/agent-a"}, count: 3}, slicesWaitForAgents},
		{"slices and no DRA agent", driverSlices{count: 3}, slicesDelete},
	} {
		if got := planDriverSlices(tc.obs); got != tc.want {
			t.Errorf("%s: planDriverSlices(%+v) = %d, want %d", tc.name, tc.obs, got, tc.want)
		}
	}
}

// The finalizer deletes the agent's DaemonSet itself, so its pods go even when it shares the
// operator's namespace (which is not deleted), before the driver's slices.
func TestCleanupTargetsIncludeTheAgentDaemonSet(t *testing.T) {
	r := &SlicerReconciler{}
	o := render.Options{Slicer: &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}}, Namespace: "op", AgentNamespace: "op"}
	for _, obj := range r.cleanupTargets(o) {
		if obj.GetObjectKind().GroupVersionKind().Kind == "DaemonSet" && obj.GetName() == render.AgentName && obj.GetNamespace() == "op" {
			return
		}
	}
	t.Error("cleanup targets lack the agent DaemonSet")
}
