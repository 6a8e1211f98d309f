package controller

import (
	"testing"
	"time"

	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/render"
)

// The agent's DaemonSet, the Module and the rest are deleted in separate steps: the Module
// before the agent namespace its unload pods run in, the agents before the driver.
func TestSplitTargets(t *testing.T) {
	module := &kmmv1beta1.Module{TypeMeta: metav1.TypeMeta{Kind: "Module"}, ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "a"}}
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	ds := &appsv1.DaemonSet{TypeMeta: metav1.TypeMeta{Kind: "DaemonSet"}, ObjectMeta: metav1.ObjectMeta{Name: "slicer-agent", Namespace: "a"}}
	agents, driver, rest := splitTargets([]client.Object{ns, module, ds})
	if len(agents) != 1 || agents[0] != ds || len(driver) != 1 || driver[0] != module || len(rest) != 1 || rest[0] != ns {
		t.Errorf("split = %v %v %v, want [DaemonSet] [Module] [Namespace]", agents, driver, rest)
	}
}

// The order of the uninstall is the issue's: slices (pods first, then allocations and
// instances), then agents, then the driver, then the rest; only the release is untimed.
func TestTeardownStepOrder(t *testing.T) {
	r := &SlicerReconciler{Namespace: "slicer-system", AgentNamespace: "slicer-agent"}
	s := &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}}
	o := render.Options{Slicer: s, Namespace: r.Namespace, AgentNamespace: r.AgentNamespace}
	var names []string
	for _, st := range r.teardownSteps(s, o) {
		names = append(names, st.name)
		if st.untimed != (st.name == "slices") {
			t.Errorf("step %q untimed = %v", st.name, st.untimed)
		}
	}
	want := []string{"slices", "agents", "driver", "components", "NodeAccelerators", "DRA ResourceSlices", "GPU operator labels", "driver upgrade labels"}
	if len(names) != len(want) {
		t.Fatalf("steps = %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("steps = %v, want %v", names, want)
		}
	}
}

// A waiting teardown step is looked at again a quarter of the elapsed time later, between a
// second and a twentieth of the timeout (which wins when it is below a second).
func TestPollAfter(t *testing.T) {
	for _, tc := range []struct{ elapsed, timeout, want time.Duration }{
		{0, DefaultDeletionTimeout, time.Second},
		{3 * time.Second, DefaultDeletionTimeout, time.Second},
		{20 * time.Second, DefaultDeletionTimeout, 5 * time.Second},
		{time.Minute, DefaultDeletionTimeout, DefaultDeletionTimeout / 20},
		{time.Hour, DefaultDeletionTimeout, DefaultDeletionTimeout / 20},
		{0, 5 * time.Second, 250 * time.Millisecond},
	} {
		if got := pollAfter(tc.elapsed, tc.timeout); got != tc.want {
			t.Errorf("pollAfter(%s, %s) = %s, want %s", tc.elapsed, tc.timeout, got, tc.want)
		}
	}
}
