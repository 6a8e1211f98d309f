//go:build k8s_1_35 || k8s_1_36

package plugin

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// SelectVictimsOnNode implements preemption.Interface with the signature of Kubernetes 1.35
// and 1.36: every pod of the node may be a victim (selectVictims keeps those of lower
// priority).
func (pr *preemptor) SelectVictimsOnNode(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo,
	pdbs []*policyv1.PodDisruptionBudget) ([]*corev1.Pod, int, *fwk.Status) {
	return pr.selectVictims(ctx, cs, pod, nodeInfo, slices.Clone(nodeInfo.GetPods()), pdbs)
}
