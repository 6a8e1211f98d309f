package plugin

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// PodDisruptionBudgets, read as the components that enforce them read them. Which pods a budget
// covers is the Eviction API's rule (k8s.io/kubernetes/pkg/registry/core/pod/storage/eviction.go,
// getPodDisruptionBudgets) and the disruption controller's, which counts the pods it computes
// the allowed disruptions over (k8s.io/kubernetes/pkg/controller/disruption/disruption.go,
// getPodsForPdb): a budget of the pod's namespace whose selector matches the pod's labels, where
// an empty selector matches every pod of the namespace and a missing or invalid one none.
// DefaultPreemption reads an empty selector as matching nothing; Slicer does not, for preemption
// either: a budget the disruption controller computes over every pod of a namespace protects
// them. Defragmentation evicts, so a move is planned only when the Eviction API would let every
// moved pod of the plan go (evictionRefusal); preemption deletes, so it counts the violations as
// DefaultPreemption does (pdbViolating) and spares violating victims where another choice exists
// (preempt.go, planSparing; moreVictims).

// budgetCovers reports whether the budget covers the pod (above).
func budgetCovers(pdb *policyv1.PodDisruptionBudget, pod *corev1.Pod) bool {
	if pdb.Namespace != pod.Namespace {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	return err == nil && sel.Matches(labels.Set(pod.Labels))
}

// pdbViolating says, for victims taken in order, whether deleting each takes a budget that
// covers it below the disruptions it allows, counting the victims before it: DefaultPreemption's
// count (filterPodsWithPDBViolation, k8s.io/kubernetes/pkg/scheduler/framework/plugins/
// defaultpreemption) with budgetCovers' reading. A pod a budget already counts as disrupted
// (status.disruptedPods) takes nothing from it.
func pdbViolating(victims []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) []bool {
	allowed := make([]int32, len(pdbs))
	for i, pdb := range pdbs {
		allowed[i] = pdb.Status.DisruptionsAllowed
	}
	out := make([]bool, len(victims))
	for k, v := range victims {
		for i, pdb := range pdbs {
			if !budgetCovers(pdb, v) {
				continue
			}
			if _, disrupted := pdb.Status.DisruptedPods[v.Name]; disrupted {
				continue
			}
			allowed[i]--
			out[k] = out[k] || allowed[i] < 0
		}
	}
	return out
}

// pdbViolations counts the violating victims (pdbViolating).
func pdbViolations(victims []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) int {
	n := 0
	for _, v := range pdbViolating(victims, pdbs) {
		if v {
			n++
		}
	}
	return n
}

// pdbProtects reports whether deleting the pod alone would violate a budget.
func pdbProtects(pod *corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) bool {
	return pdbViolating([]*corev1.Pod{pod}, pdbs)[0]
}

// byImportance sorts pods as DefaultPreemption ranks victims (MoreImportantPod): the highest
// priority first, then the earliest started; then by UID, so that the order is total.
func byImportance(pods []*corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if pa, pb := corev1helpers.PodPriority(a), corev1helpers.PodPriority(b); pa != pb {
			return pa > pb
		}
		if ta, tb := startTime(a), startTime(b); !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		return a.UID < b.UID
	})
}

func startTime(pod *corev1.Pod) metav1.Time {
	if pod.Status.StartTime != nil {
		return *pod.Status.StartTime
	}
	return pod.CreationTimestamp
}

// evictionRefusal says which of pods, evicted in order, the Eviction API would refuse, and why
// (-1 and "" when it would evict them all), as eviction.go decides: a pod that is Pending,
// Succeeded, Failed or being deleted goes whatever its budgets; one more than one budget covers
// is refused; an unready one goes without taking from its budget when the budget says so
// (unhealthyPodEvictionPolicy AlwaysAllow, or its healthy pods are enough); any other takes one of
// the disruptions its budget allows, counting the pods before it, and is refused when none is
// left. Not read: a budget whose controller has not caught up with its spec (observedGeneration
// behind) is refused by the API with 429 for a moment; the plan is then abandoned as for any
// refusal (defrag_evict.go).
func evictionRefusal(pods []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) (int, string) {
	allowed := map[*policyv1.PodDisruptionBudget]int32{}
	for k, pod := range pods {
		switch pod.Status.Phase {
		case corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed:
			continue
		}
		if pod.DeletionTimestamp != nil {
			continue
		}
		var covering []*policyv1.PodDisruptionBudget
		for _, pdb := range pdbs {
			if budgetCovers(pdb, pod) {
				covering = append(covering, pdb)
			}
		}
		switch {
		case len(covering) == 0:
			continue
		case len(covering) > 1:
			return k, fmt.Sprintf("%d PodDisruptionBudgets cover it (the Eviction API evicts a pod of one at most)", len(covering))
		}
		pdb := covering[0]
		if !podutil.IsPodReady(pod) {
			if p := pdb.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow {
				continue
			}
			if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0 {
				continue
			}
		}
		left, seen := allowed[pdb]
		if !seen {
			left = pdb.Status.DisruptionsAllowed
		}
		if left <= 0 {
			if seen {
				return k, "its PodDisruptionBudget allows no more disruptions after the plan's other moves"
			}
			return k, "a PodDisruptionBudget allows no disruption"
		}
		allowed[pdb] = left - 1
	}
	return -1, ""
}

// evictionRefused says why the Eviction API would refuse to evict the pod alone ("" when it
// would evict it).
func evictionRefused(pod *corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) string {
	_, why := evictionRefusal([]*corev1.Pod{pod}, pdbs)
	return why
}
