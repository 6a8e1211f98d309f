package mig

import (
	"fmt"
	"math"
)

// MaxNodeScore is kube-scheduler's framework.MaxNodeScore.
const MaxNodeScore int64 = 100

// GPU is one GPU of a node as the scheduler sees it.
type GPU struct {
	// State is the MIG occupancy; a whole-mode GPU of a MIG model has its model's EmptyGPU.
	State GPUState
	// Usable is false for an unhealthy GPU or one another tool owns (and, for callers that
	// predate Mode, one without MIG mode).
	Usable bool
	// Mode is the GPU's MIG mode; the zero value is MIG mode (mode.go).
	Mode GPUMode
	// Switchable is true when the node may switch the GPU's MIG mode once it is empty: the
	// policy allows it and, on A100/A30, a GPU reset is allowed. The zero value never switches.
	Switchable bool
	// InUse is true when a pod or another client holds the GPU as a whole (whole mode), or a
	// client holds an empty MIG GPU: either way its mode cannot change, and a whole-mode GPU
	// takes no whole-GPU request.
	InUse bool
}

// Node is the list of GPUs of one node, in a stable order (the index is the GPU's identity
// for Place's result).
type Node struct {
	GPUs []GPU
	// Topology is how the GPUs are connected (NewTopology), read by the whole-GPU choice
	// (whole.go); nil, or one of another number of GPUs, ranks every pair LinkOther.
	Topology *Topology
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
// that leaves the largest legal free blocks; a node loses more when the plan takes a GPU free
// for whole use, the more of its GPUs are (wholeBreakPenalty). It does not allocate. Score and
// Place share one code path, so Place succeeds exactly when Score reports the node feasible.
func Score(node Node, req *Request) (int64, bool) {
	var out [MaxRequestSlices]Assignment
	cost, ok := plan(node, req, &out)
	if !ok {
		return 0, false
	}
	// cost is in millionths of a whole GPU's V, summed over the slices.
	s := MaxNodeScore - int64(math.Ceil(float64(cost)*float64(MaxNodeScore)/(1e6*float64(req.n))))
	s -= wholeBreakPenalty(node, out[:req.n])
	return min(max(s, 0), MaxNodeScore), true
}

// wholeBreakWeight is the most a slice's score loses for taking a GPU that could serve a
// whole-GPU request.
const wholeBreakWeight = 75

// wholeBreakPenalty is what a plan loses for the whole-GPU demand it strands: when one of its
// slices takes a GPU free for whole use (an empty switchable MIG GPU, or a whole GPU it
// switches), up to wholeBreakWeight for the share of the node's GPUs free for whole use. Among
// nodes where a slice must break a GPU it prefers the node already sliced or busy, so that the
// nodes with the most free whole GPUs stay whole for multi-GPU requests. A node with no GPU
// free for whole use (not switchable, as on a MIG-only node) loses nothing. It does not
// allocate.
func wholeBreakPenalty(node Node, as []Assignment) int64 {
	breaks := false
	for _, a := range as {
		breaks = breaks || node.GPUs[a.GPU].WholeUse() != UseNo
	}
	if !breaks {
		return 0
	}
	free := 0
	for g := range node.GPUs {
		if node.GPUs[g].WholeUse() != UseNo {
			free++
		}
	}
	return ceilDiv(wholeBreakWeight*int64(free), int64(len(node.GPUs)))
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
	var switched uint32 // whole GPUs this plan switched to MIG for an earlier slice
	var total int64
	for i := 0; i < req.n; i++ {
		bestGPU, bestSlot := -1, noSlot
		var bestCost int64
		var bestT *modelTable
		for g := range node.GPUs {
			gpu := &node.GPUs[g]
			m := gpu.State.model
			if m == 0 || m > numModels || (!gpu.slicesNow() && switched&(1<<g) == 0) {
				continue // not in MIG mode, nor switched by this plan for an earlier slice
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
			// No MIG GPU takes the slice: switch an empty whole GPU to MIG, the last resort.
			g, slot, cost, t := switchForSlice(node, req, i, switched)
			if g < 0 {
				return 0, false
			}
			switched |= 1 << g
			bestGPU, bestSlot, bestCost, bestT = g, slot, cost, t
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
// own snapshot, e.g. the simulator and the scheduler's Reserve). An assignment to a whole-mode
// GPU that SliceUse allows switching sets its Mode to ModeMIG: the snapshot records the switch
// the node will make. On error nothing changes.
func Apply(node Node, as []Assignment) error {
	saved := make([]GPU, len(node.GPUs))
	copy(saved, node.GPUs)
	for _, a := range as {
		if a.GPU < 0 || a.GPU >= len(node.GPUs) {
			copy(node.GPUs, saved)
			return fmt.Errorf("assignment for GPU %d on a node with %d GPUs", a.GPU, len(node.GPUs))
		}
		gpu := &node.GPUs[a.GPU]
		if gpu.SliceUse() == UseAfterSwitch {
			gpu.Mode = ModeMIG
		}
		if gpu.Mode != ModeMIG {
			copy(node.GPUs, saved)
			return fmt.Errorf("GPU %d is in %s mode: it takes no MIG slice", a.GPU, gpu.Mode)
		}
		next, err := gpu.State.Take(a.Profile, a.Placement)
		if err != nil {
			copy(node.GPUs, saved)
			return fmt.Errorf("GPU %d: %w", a.GPU, err)
		}
		gpu.State = next
	}
	return nil
}

// switchCost is what switching a whole GPU to MIG costs a plan, in plan's unit (millionths of
// an empty GPU's V): a whole GPU is lost to whole-GPU requests, which outweighs any slice.
const switchCost = 1_000_000

// switchForSlice picks the whole-mode GPU to switch to MIG for slice i when no MIG GPU takes
// it: among the empty switchable whole GPUs of the first maxTopologyGPUs that this plan has not
// switched yet (the mask switched) whose model has the
// profile, the lowest cost, then the one least connected to the other free whole GPUs (the
// best-connected stay whole for multi-GPU requests), then the lowest index. It returns the GPU,
// the slot on its empty state, the cost with switchCost, and the table; GPU -1 when none.
func switchForSlice(node Node, req *Request, i int, switched uint32) (int, int, int64, *modelTable) {
	best, bestSlot, bestLinks := -1, noSlot, 0
	var bestCost int64
	var bestT *modelTable
	topo := node.topology()
	var ready uint32
	if topo != nil {
		ready, _ = wholeCandidates(node)
	}
	for g := range min(len(node.GPUs), maxTopologyGPUs) {
		gpu := &node.GPUs[g]
		if gpu.SliceUse() != UseAfterSwitch || switched&(1<<g) != 0 {
			continue
		}
		m := gpu.State.model
		p := req.prof[m][i]
		if p < 0 {
			continue
		}
		t := tableFor(m)
		s := t.best[p] // state 0 is the empty GPU
		if s == noSlot {
			continue
		}
		cost := switchCost + int64(t.bestCost[p])*1e6/int64(t.emptyValue)
		links := topo.linksTo(g, ready&^(1<<g))
		if best < 0 || cost < bestCost || (cost == bestCost && links < bestLinks) {
			best, bestSlot, bestCost, bestLinks, bestT = g, int(s), cost, links, t
		}
	}
	return best, bestSlot, bestCost, bestT
}
