package mig

import (
	"fmt"
	"math"
)

// MaxNodeScore is kube-scheduler's framework.MaxNodeScore.
const MaxNodeScore int64 = 100

// GPU is one GPU of a node as the scheduler sees it.
type GPU struct {
	State GPUState
	// Usable is false for an unhealthy GPU, one without MIG mode, or one another tool owns.
	Usable bool
}

// Node is the list of GPUs of one node, in a stable order (the index is the GPU's identity
// for Place's result).
type Node struct {
	GPUs []GPU
}

// Assignment is where one slice of a request goes.
type Assignment struct {
	// Slice is the index of the slice in Request.Slices().
	Slice     int
	GPU       int
	Profile   Profile
	Placement Placement
}

// Score is the Slicer policy's answer to the scheduler's Filter and Score: a score in [0,
// MaxNodeScore] and whether the request fits on the node. Each slice goes to the (GPU, start)
// that loses the least future placeability V, which prefers GPUs already in use and the start
// that leaves the largest legal free blocks. It does not allocate. Score and Place share one
// code path, so Place succeeds exactly when Score reports the node feasible.
func Score(node Node, req *Request) (int64, bool) {
	var out [MaxRequestSlices]Assignment
	cost, ok := plan(node, req, &out)
	if !ok {
		return 0, false
	}
	// cost is in millionths of a whole GPU's V, summed over the slices.
	s := MaxNodeScore - int64(math.Ceil(float64(cost)*float64(MaxNodeScore)/(1e6*float64(req.n))))
	return min(max(s, 0), MaxNodeScore), true
}

// Place is where Score's policy puts each slice, or an error when the request does not fit.
func Place(node Node, req *Request) ([]Assignment, error) {
	var out [MaxRequestSlices]Assignment
	if _, ok := plan(node, req, &out); !ok {
		return nil, fmt.Errorf("request does not fit: %s", Explain(node, req))
	}
	return append([]Assignment(nil), out[:req.n]...), nil
}

// plan places the request's slices one by one, largest first, on a private overlay of the
// node's states. It returns the summed cost (V lost, in millionths of an empty GPU's V) and
// whether every slice found a place. It does not allocate.
func plan(node Node, req *Request, out *[MaxRequestSlices]Assignment) (int64, bool) {
	if req == nil || req.n == 0 {
		return 0, false
	}
	var overlay [MaxRequestSlices]struct {
		gpu int
		idx uint16
	}
	nover := 0
	stateOf := func(g int) uint16 {
		for i := 0; i < nover; i++ {
			if overlay[i].gpu == g {
				return overlay[i].idx
			}
		}
		return node.GPUs[g].State.idx
	}
	var total int64
	for i := 0; i < req.n; i++ {
		bestGPU, bestSlot := -1, noSlot
		var bestCost int64
		var bestT *modelTable
		for g := range node.GPUs {
			gpu := &node.GPUs[g]
			m := gpu.State.model
			if !gpu.Usable || m == 0 || m > numModels {
				continue
			}
			p := req.prof[m][i]
			if p < 0 {
				continue
			}
			t := tableFor(m)
			kidx := int(stateOf(g))*t.nprof() + int(p)
			s := t.best[kidx]
			if s == noSlot {
				continue
			}
			if cost := int64(t.bestCost[kidx]) * 1e6 / int64(t.emptyValue); bestGPU < 0 || cost < bestCost {
				bestGPU, bestSlot, bestCost, bestT = g, int(s), cost, t
			}
		}
		if bestGPU < 0 {
			return 0, false
		}
		t := bestT
		st := int(stateOf(bestGPU))
		next := uint16(t.take[st*t.nslots()+bestSlot])
		found := false
		for j := 0; j < nover; j++ {
			if overlay[j].gpu == bestGPU {
				overlay[j].idx, found = next, true
			}
		}
		if !found {
			overlay[nover].gpu, overlay[nover].idx = bestGPU, next
			nover++
		}
		sl := t.slots[bestSlot]
		out[i] = Assignment{Slice: i, GPU: bestGPU, Profile: t.profiles[sl.prof],
			Placement: Placement{Start: int(sl.start), Size: int(sl.size)}}
		total += bestCost
	}
	return total, true
}

// Apply takes the assignments on the node's GPU states, in place (for callers that keep their
// own snapshot, e.g. the simulator and the scheduler's Reserve). On error nothing changes.
func Apply(node Node, as []Assignment) error {
	saved := make([]GPUState, len(node.GPUs))
	for i, g := range node.GPUs {
		saved[i] = g.State
	}
	for _, a := range as {
		if a.GPU < 0 || a.GPU >= len(node.GPUs) {
			restore(node, saved)
			return fmt.Errorf("assignment for GPU %d on a node with %d GPUs", a.GPU, len(node.GPUs))
		}
		next, err := node.GPUs[a.GPU].State.Take(a.Profile, a.Placement)
		if err != nil {
			restore(node, saved)
			return fmt.Errorf("GPU %d: %w", a.GPU, err)
		}
		node.GPUs[a.GPU].State = next
	}
	return nil
}

func restore(node Node, saved []GPUState) {
	for i := range node.GPUs {
		node.GPUs[i].State = saved[i]
	}
}
