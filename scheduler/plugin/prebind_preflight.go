//go:build !k8s_1_35

package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// PreBindPreFlight tells the framework whether PreBind has work for the pod.
// Since Kubernetes 1.36 it also returns a result (which the plugin leaves
// nil); the 1.35 signature is in prebind_preflight_k8s_1_35.go. Built for
// 1.35 without the k8s_1_35 tag, this file does not compile
// (PreBindPreFlightResult is undefined there): see docs/design/k8s-minors.md.
func (p *Plugin) PreBindPreFlight(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	return nil, preBindPreFlight(cs)
}
