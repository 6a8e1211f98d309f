//go:build k8s_1_35

package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// PreBindPreFlight tells the framework whether PreBind has work for the pod,
// with the Kubernetes 1.35 signature (the build of scheduler/k8s-1.35). Built
// with this tag against a newer framework, the plugin no longer satisfies
// fwk.PreBindPlugin (plugin.go) and the build fails.
func (p *Plugin) PreBindPreFlight(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, _ string) *fwk.Status {
	return preBindPreFlight(cs)
}
