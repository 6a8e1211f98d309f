package slicemap

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// In DRA mode the stock kube-scheduler places MIG pods and does not preempt the holders of
// ResourceClaims (it answers "Preemption is not helpful for scheduling"). A Pending pod there
// that no GPU can take now, but that evicting pods of lower priority would place, waits for
// room freed by other means: the map says so (PendingPod.Preemption), with the cheapest
// eviction Slicer's own scheduler would have chosen (mig.ChooseVictims).

// addPreemptionNotes sets Preemption on the pending pods that ask through ResourceClaims or
// nvidia.com/mig-* and that only preemption could place.
func addPreemptionNotes(pods []PendingPod, in Input, nodes []Node) {
	prio := map[podKey]int32{}
	for i := range in.Pods {
		p := &in.Pods[i]
		prio[podKey{p.Namespace, p.Name}] = podPriority(p)
	}
	for i := range pods {
		pp := &pods[i]
		if !asksThroughDRA(pp) {
			continue
		}
		for _, e := range pp.Explanations {
			if e.Fits > 0 {
				continue
			}
			if note := preemptionNote(e.Profile, prio[podKey{pp.Namespace, pp.Name}], nodes, prio); note != "" {
				pp.Preemption = note
				break
			}
		}
	}
}

func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// asksThroughDRA: the pod's MIG requests go through claims or nvidia.com/mig-* (the stock
// scheduler's), not slicer.dev/mig-* (Slicer's scheduler, which preempts).
func asksThroughDRA(pp *PendingPod) bool {
	for _, r := range pp.Requests {
		if strings.HasPrefix(r.Resource, mig.ResourcePrefix) {
			return false
		}
	}
	return len(pp.Requests) > 0
}

// preemptionNote is the cheapest eviction that would make room for one slice of profile, over
// every GPU of the map, worded; "" when none would.
func preemptionNote(profile string, preemptor int32, nodes []Node, prio map[podKey]int32) string {
	var best mig.VictimChoice
	where := ""
	for _, n := range nodes {
		for _, g := range n.GPUs {
			m, err := mig.ParseModel(g.Model)
			if err != nil || g.MIGMode != string(slicerv1alpha1.MIGModeEnabled) || g.Health != string(slicerv1alpha1.GPUHealthy) {
				continue
			}
			p, err := m.Profile(profile)
			if err != nil {
				continue
			}
			c, ok, err := mig.ChooseVictims(m, holders(n, g, prio), p, preemptor)
			if err != nil || !ok || len(c.Owners) == 0 {
				continue
			}
			if where == "" || c.Less(best) {
				best, where = c, fmt.Sprintf("node %s GPU %d", n.Name, g.Index)
			}
		}
	}
	if where == "" {
		return ""
	}
	return fmt.Sprintf("only preemption could place %s: evicting %s (priorities %v) on %s would free %s@%d; "+
		"kube-scheduler does not preempt pods for their ResourceClaims, so the pod waits for room freed otherwise",
		mig.LegalProfileName(profile), strings.Join(best.Owners, ", "), best.Priorities, where,
		mig.LegalProfileName(profile), best.Placement.Start)
}

// holders are the GPU's slices (realized, and allocated but not prepared) with the pods that
// hold them: a slice held by no known pod, or by a claim shared by several pods, is never a
// victim.
func holders(n Node, g GPU, prio map[podKey]int32) []mig.Holder {
	var hs []mig.Holder
	add := func(profile string, start, size int32, pods []Pod) {
		h := mig.Holder{Instance: mig.Instance{Profile: profile, Placement: mig.Placement{Start: int(start), Size: int(size)}}}
		if len(pods) == 1 && !pods[0].Missing && !pods[0].UIDMismatch {
			k := podKey{pods[0].Namespace, pods[0].Name}
			h.Owner, h.Priority = k.namespace+"/"+k.name, prio[k]
			h.Leaving = pods[0].Terminating
		}
		hs = append(hs, h)
	}
	for _, s := range g.Slices {
		var pods []Pod
		switch {
		case s.Claim != nil:
			pods = s.Claim.Pods
		case s.Allocation != nil && s.Allocation.Pod != nil:
			pods = []Pod{*s.Allocation.Pod}
		}
		add(s.Profile, s.Start, s.Size, pods)
	}
	for _, c := range n.Unprepared {
		if c.GPUIndex == g.Index && c.Size > 0 {
			add(c.Profile, c.Start, c.Size, c.Pods)
		}
	}
	return hs
}
