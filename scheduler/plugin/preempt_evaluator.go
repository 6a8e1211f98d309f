//go:build !k8s_1_35

package plugin

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
)

// newEvaluator builds the preemption evaluator with its own executor (Kubernetes 1.36 and
// later; 1.35's is in preempt_evaluator_k8s_1_35.go). Victims are deleted within PostFilter:
// asynchronous preemption would keep the pod out of the queue through DefaultPreemption's
// PreEnqueue, which knows nothing of this executor.
func newEvaluator(h fwk.Handle, i preemption.Interface) *preemption.Evaluator {
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	fts.EnableAsyncPreemption = false
	return preemption.NewEvaluator(Name, h, i, preemption.NewExecutor(h, fts))
}
