package plugin

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Where a moved pod's replacement may go (docs/design/defragmentation.md): the planner re-creates
// a moved slice only on a node that the moved pod passes kube-scheduler's node filters for, read
// from the scheduler's node informer (the lister it feeds its cache from) with the helpers those
// filters use: NodeUnschedulable (spec.unschedulable unless the pod tolerates the unschedulable taint),
// NodeAffinity (spec.nodeSelector and required node affinity) and TaintToleration (NoSchedule
// and NoExecute taints the pod does not tolerate). The replacement is a new pod of the same
// controller, so the moved pod's spec stands for its template. Not checked: the other filters
// (resources other than the slice, ports, volumes, inter-pod affinity and topology spread),
// which depend on what else runs on the node when the replacement comes. The Node objects come
// from the informer rather than the cycle's snapshot (fwk.NodeInfo): the snapshot is taken when
// the cycle starts and can lag a change the plugin has already counted, and an answer computed
// on it would then be kept under a generation that claims the change (defrag_memo.go).

// destinations implements mig.DestinationFunc for the plan being made: a moved slice's pod (the
// one the movability callback found there) may go to the nodes it passes the node filters for
// and whose driver has its profile (snapshot.Node.Lacks, as Filter reads it).
func (m *movableIndex) destinations(from mig.SliceAt) func(int) bool {
	pod := m.podAt(from)
	if pod == nil {
		return func(int) bool { return false } // not asked: the planner moves only movable slices
	}
	aff := nodeaffinity.GetRequiredNodeAffinity(pod)
	prof := from.Profile.Name
	// The planner asks about each node once (mig.DestinationFunc): no memo here.
	return func(n int) bool { return m.nodes[n].Lacks[prof] == "" && m.nodeAdmits(pod, aff, n) }
}

// destinationClass implements mig.DefragOptions.DestinationClass: moved pods whose specs agree
// on every field nodeAdmits reads (spec.nodeSelector, the required node affinity and the
// tolerations) are admitted by the same nodes, so they share one class and the planner asks
// about each node once per class instead of once per slice. Classes are numbered from 1 in the
// order the plan meets them (destinationClassOf's encoding, interned once per plan), so the
// planner finds a class without hashing its encoding; 0 (a class of its own) for a slice whose
// pod is not known. When some node's driver lacks a profile, the slice's profile is part of its
// class (destinations reads it). Each pod's class is computed once per plan (a movable pod has
// one slice), and its encoding is remembered across plans (podFacts).
func (m *movableIndex) destinationClass(from mig.SliceAt) int {
	pod := m.podAt(from)
	if pod == nil {
		return 0
	}
	c, ok := m.classes[pod]
	if !ok {
		key := m.d.facts.classKey(pod)
		if key != "" && m.lacks {
			key = from.Profile.Name + " " + key
		}
		if key != "" {
			if c, ok = m.classIDs[key]; !ok {
				c = len(m.classIDs) + 1
				m.classIDs[key] = c
			}
		}
		m.classes[pod] = c
	}
	return c
}

// destinationClassOf encodes the fields of pod's spec that nodeAdmits reads; encoding/json
// writes map keys sorted, so equal specs encode equally.
func destinationClassOf(pod *corev1.Pod) string {
	var required *corev1.NodeSelector
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		required = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	b, err := json.Marshal(struct {
		NodeSelector map[string]string    `json:"s"`
		Required     *corev1.NodeSelector `json:"a"`
		Tolerations  []corev1.Toleration  `json:"t"`
	}{pod.Spec.NodeSelector, required, pod.Spec.Tolerations})
	if err != nil {
		return "" // no encoding: a class of its own (0)
	}
	return string(b)
}

// nodeAdmits reports whether pod passes the node filters on node n of the plan's nodes, as the
// scheduler's node informer has it (a node it does not know admits nothing).
func (m *movableIndex) nodeAdmits(pod *corev1.Pod, aff nodeaffinity.RequiredNodeAffinity, n int) bool {
	node, err := m.d.nodes.Get(m.nodes[n].Name)
	if err != nil {
		return false
	}
	log := klog.Background()
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(log, pod.Spec.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, m.d.tolerationOps) {
		return false
	}
	if ok, err := aff.Match(node); err != nil || !ok {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(log, node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, m.d.tolerationOps)
	return !untolerated
}
