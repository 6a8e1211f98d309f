package plugin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// PreFilter turns the pod's slice requests into a mig.Request in CycleState.
// A pod without a request is skipped (Filter/Score/Reserve/PreBind are not
// called for it). A pod that already holds allocations (the scheduler
// restarted after PreBind) is pinned to their node and keeps them.
func (p *Plugin) PreFilter(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	// Taken before any snapshot read: see reject.
	gen := p.cache.FreedGeneration()
	items, err := PodRequest(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	whole, err := wholeRequest(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if whole > 0 {
		s := &podState{freedGen: gen}
		if st := preFilterWhole(s, whole, p.cache.PodAllocations(pod.UID)); st != nil {
			if st.Code() == fwk.Unschedulable {
				p.reject(klog.FromContext(ctx), pod, gen)
			}
			return nil, st
		}
		cs.Write(stateKey, s)
		if s.adoptedNode != "" {
			return &fwk.PreFilterResult{NodeNames: sets.New(s.adoptedNode)}, nil
		}
		return nil, nil
	}
	if items == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	full, err := mig.NewRequest(items...)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	s := &podState{slices: full.Slices(), freedGen: gen}
	p.defrag.sweep()
	existing := p.cache.PodAllocations(pod.UID)
	if len(existing) == 0 {
		s.req = full
		for i := range s.slices {
			s.missing = append(s.missing, int32(i))
		}
		s.noRoom = "no GPU has free room for " + describe(s.slices)
		if st := p.defrag.claim(klog.FromContext(ctx), pod, s); st != nil {
			// Retried when room is freed. No state is written, so PostFilter neither
			// preempts nor plans for it, and nothing preempts for a room being freed.
			p.reject(klog.FromContext(ctx), pod, gen)
			return nil, st
		}
		cs.Write(stateKey, s)
		return nil, nil
	}
	if st := adopt(s, existing); st != nil {
		if st.Code() == fwk.Unschedulable {
			// An allocation of the pod is still being released: retried when it is gone.
			p.reject(klog.FromContext(ctx), pod, gen)
		}
		return nil, st
	}
	cs.Write(stateKey, s)
	return &fwk.PreFilterResult{NodeNames: sets.New(s.adoptedNode)}, nil
}

// adopt fills s from the pod's existing allocations.
func adopt(s *podState, existing []*snapshot.Allocation) *fwk.Status {
	have, st := adoptAllocations(s, existing, func(sl snapshot.Slot) bool {
		return int(sl.Index) < len(s.slices) && sl.Profile == s.slices[sl.Index]
	}, describe(s.slices))
	if st != nil {
		return st
	}
	var items []mig.RequestItem
	for i, name := range s.slices {
		if !have[int32(i)] {
			s.missing = append(s.missing, int32(i))
			items = append(items, mig.RequestItem{Profile: name, Count: 1})
		}
	}
	if len(items) > 0 {
		req, err := mig.NewRequest(items...)
		if err != nil {
			return fwk.AsStatus(err)
		}
		s.req = req
		s.noRoom = "no GPU has free room for the rest of " + describe(s.slices)
	}
	return nil
}

// adoptAllocations records the pod's existing allocations in s (adopted, adoptedNode) and
// returns the indices they hold: each must match the request (fits, which request describes),
// none be in release, all be on one node.
func adoptAllocations(s *podState, existing []*snapshot.Allocation, fits func(snapshot.Slot) bool, request string) (map[int32]bool, *fwk.Status) {
	have := map[int32]bool{}
	for _, a := range existing {
		switch {
		case a.Deleting:
			return nil, fwk.NewStatus(fwk.Unschedulable, "a previous allocation of this pod is still being released")
		case s.adoptedNode != "" && a.NodeName != s.adoptedNode:
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "the pod's allocations are on different nodes")
		case !fits(a.Slot) || have[a.Slot.Index]:
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("allocation %s/%s does not match the pod's request for %s", a.Namespace, a.Name, request))
		}
		s.adoptedNode = a.NodeName
		have[a.Slot.Index] = true
		s.adopted = append(s.adopted, a.Slot)
	}
	return have, nil
}
