package render

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// agentPod is the pod the agent DaemonSet rendered for o would create.
func agentPod(t *testing.T, o Options) *corev1.Pod {
	t.Helper()
	objs, err := Agent(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			return &corev1.Pod{ObjectMeta: ds.Spec.Template.ObjectMeta, Spec: ds.Spec.Template.Spec}
		}
	}
	t.Fatal("no agent DaemonSet")
	return nil
}

// The operator tells the agent pods that publish the DRA driver's ResourceSlices from the
// others by the pods themselves: the rendered DRA agent is one, the device-plugin agent is
// not, and both carry the labels the operator lists them by.
func TestRunsDRAPlugin(t *testing.T) {
	dra := agentPod(t, testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Frontend = slicerv1alpha1.FrontendDRA }))
	dp := agentPod(t, testOptions())
	if !RunsDRAPlugin(dra) {
		t.Errorf("the DRA agent's pod does not run the DRA plugin: args %v", dra.Spec.Containers[0].Args)
	}
	if RunsDRAPlugin(dp) {
		t.Errorf("the device-plugin agent's pod runs the DRA plugin: args %v", dp.Spec.Containers[0].Args)
	}
	for _, p := range []*corev1.Pod{dra, dp} {
		for k, v := range AgentPodLabels() {
			if p.Labels[k] != v {
				t.Errorf("agent pod labels %v lack %s=%s", p.Labels, k, v)
			}
		}
	}
}
