//go:build !k8s_1_35 && !k8s_1_36

package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
)

// SelectVictimsOnNode implements preemption.Interface (Kubernetes 1.37: the framework offers
// the victims, pod groups as one). A victim that is a group of pods, or lies on other nodes,
// is not Slicer's to take apart: its slices stay.
func (pr *preemptor) SelectVictimsOnNode(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo,
	all []*preemption.DomainVictim, pdbs []*policyv1.PodDisruptionBudget) ([]*corev1.Pod, int, *fwk.Status) {
	var possible []fwk.PodInfo
	for _, dv := range all {
		if pods := dv.Pods(); len(pods) == 1 && pods[0].GetPod().Spec.NodeName == nodeInfo.Node().Name {
			possible = append(possible, pods[0])
		}
	}
	return pr.selectVictims(ctx, cs, pod, nodeInfo, possible, pdbs)
}
