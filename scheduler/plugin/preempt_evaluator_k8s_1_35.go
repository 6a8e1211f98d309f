//go:build k8s_1_35

package plugin

import (
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
)

// newEvaluator builds the preemption evaluator with Kubernetes 1.35's constructor, which
// takes whether to preempt asynchronously (no: see preempt_evaluator.go).
func newEvaluator(h fwk.Handle, i preemption.Interface) *preemption.Evaluator {
	return preemption.NewEvaluator(Name, h, i, false)
}
