package plugin

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// maxHolders is how many blocking pods the failure message names.
const maxHolders = 5

// PostFilter explains, in words, why a MIG pod fits nowhere: the closest
// node and GPU, what is free there and which pods hold the rest. Then it
// preempts, as kube-scheduler's DefaultPreemption would but with Slicer's
// choice of victims (preempt.go): on success the pod is nominated to the node
// and the placement cleared for it is kept (nominations.go). Otherwise it
// answers UnschedulableAndUnresolvable, so DefaultPreemption, after it in
// the profile for pods that ask for no slice, does not preempt for a MIG pod
// by another choice; the reason then says what preemption waits for or why
// it cannot help.
func (p *Plugin) PostFilter(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	s, err := readState(cs)
	whole := err == nil && s.whole > 0
	if !whole && (err != nil || s.req == nil) {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	p.reject(klog.FromContext(ctx), pod, s.freedGen)
	var why string
	if whole {
		why = p.explainWhole(s)
	} else {
		why = p.explain(pod.Namespace, s)
	}
	var res *fwk.PostFilterResult
	if p.preemptor != nil {
		var st *fwk.Status
		res, st = p.preemptor.preempt(ctx, cs, pod, m, s)
		switch {
		case st.IsSuccess():
			return res, st
		case st.Code() == fwk.Error:
			return nil, st
		}
		why += "; preemption: " + st.Message()
	}
	if whole {
		// Preemption found nothing: defragmentation may empty the GPUs by moving slices. While
		// the pod waits for GPUs cleared or emptied for it on a Slicer node the chain ends here;
		// otherwise DefaultPreemption, after this plugin in the profile, may still preempt on
		// the nodes NVIDIA's device plugin serves, which Slicer only counts.
		moved, more := p.defrag.defragmentWhole(ctx, pod, s)
		if more != "" {
			why += "; " + more
		}
		if moved != nil {
			return moved, fwk.NewStatus(fwk.Unschedulable, why)
		}
		if p.waitsOnSlicerNode(pod) {
			return res, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
		}
		return res, fwk.NewStatus(fwk.Unschedulable, why)
	}
	moved, more := p.defrag.defragment(ctx, pod, s)
	if more != "" {
		why += "; " + more
	}
	if moved != nil || p.preemptor == nil {
		// Pods were evicted for this one: it is nominated to the room opened for it, and
		// waits (Unschedulable, retried as room frees) rather than ending the chain.
		return moved, fwk.NewStatus(fwk.Unschedulable, why)
	}
	return res, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
}

// explain names the closest node: the one with the most free compute slices
// on usable GPUs (ties: by name) whose driver has the pod's profiles; on it, the GPU with the
// most, and the pods that hold it (those of namespace ns by name, the others counted: podsFor).
func (p *Plugin) explain(ns string, s *podState) string {
	var best *snapshot.Node
	bestGPU, bestFree := -1, -1
	usable := 0
	lacking := "" // why the first node skipped for its driver was skipped
	slices := s.req.Slices()
	offers := map[mig.Model]bool{} // offersAll per model: asked once per model, not per GPU
	for _, n := range p.cache.Nodes() {
		if s.adoptedNode != "" && n.Name != s.adoptedNode {
			continue
		}
		if why := driverLacks(n, s); why != "" {
			if lacking == "" {
				lacking = "node " + n.Name + ": " + why
			}
			continue
		}
		for i, g := range n.GPUs {
			if !g.Usable {
				continue
			}
			usable++
			// a GPU whose model has no such profile is never "closest"
			m := n.MIG.GPUs[i].State.Model()
			ok, known := offers[m]
			if !known {
				ok = offersAll(m, slices)
				offers[m] = ok
			}
			if !ok {
				continue
			}
			if f := n.MIG.GPUs[i].State.FreeComputeSlices(); f > bestFree {
				best, bestGPU, bestFree = n, i, f
			}
		}
	}
	first := mig.LegalProfileName(s.req.Slices()[0])
	if best == nil && lacking != "" {
		return fmt.Sprintf("no node whose NVIDIA driver has %s has a usable MIG GPU for it; %s", describe(s.slices), lacking)
	}
	if best == nil && usable > 0 {
		var models []string
		for _, m := range mig.ModelsSupporting(first) {
			models = append(models, m.String())
		}
		return fmt.Sprintf("no usable MIG GPU offers %s (models that do: %s); ask for a profile of the cluster's GPUs", describe(s.slices), strings.Join(models, ", "))
	}
	if best == nil {
		return fmt.Sprintf("no usable MIG GPU for %s in the cluster", describe(s.slices))
	}
	g := best.GPUs[bestGPU]
	st := best.MIG.GPUs[bestGPU].State
	var b strings.Builder
	fmt.Fprintf(&b, "no GPU has a free slot for %s; closest: node %s gpu %d (%d of %d compute slices free",
		describe(s.slices), best.Name, g.Index, bestFree, st.Model().ComputeSlices())
	if prof, err := st.Model().Profile(s.req.Slices()[0]); err == nil {
		if why := st.WhyNot(prof); why != "" {
			fmt.Fprintf(&b, "; %s: %s", first, why)
		}
	}
	b.WriteString(")")
	if hs := p.cache.Holders(best.Name)[g.UUID]; len(hs) > 0 {
		words := podsFor(ns, hs, maxHolders)
		b.WriteString(" blocked by ")
		if inNamespace(ns, words[0]) {
			b.WriteString("pods ")
		}
		b.WriteString(strings.Join(words, ", "))
	}
	return b.String()
}

// offersAll reports whether model m has every requested profile.
func offersAll(m mig.Model, profiles []string) bool {
	for _, name := range profiles {
		if _, err := m.Profile(name); err != nil {
			return false
		}
	}
	return true
}

// preemptingMessage is the Pending reason of a pod of namespace ns right after it preempted:
// where its slices go and the pods it waits for (podsFor).
func preemptingMessage(ns, node string, plan dryPlan) string {
	var where []string
	for _, sl := range plan.slots {
		where = append(where, sl.String())
	}
	victims := podsFor(ns, plan.victims, maxWaits)
	return fmt.Sprintf("preemption: room cleared on node %s at %s; waiting for %d pods of lower priority to terminate: %s",
		node, strings.Join(where, ", "), len(plan.victims), strings.Join(victims, ", "))
}

// waitsOnSlicerNode reports whether room was cleared for the pod on a node Slicer manages (held,
// or the pod is nominated there): DefaultPreemption must not preempt again for it meanwhile.
func (p *Plugin) waitsOnSlicerNode(pod *corev1.Pod) bool {
	node := pod.Status.NominatedNodeName
	if n, ok := p.held.get(pod.UID); ok {
		node = n.node
	}
	return node != "" && p.cache.Node(node) != nil && !p.nvidiaManaged(node)
}
