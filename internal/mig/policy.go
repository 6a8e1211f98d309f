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

// Policy answers the scheduler's two questions. Score and Place share one code path, so Place
// succeeds exactly when Score reports the node feasible.
type Policy interface {
	Name() string
	// Score returns a score in [0, MaxNodeScore] and whether the request fits on the node.
	// It does not allocate.
	Score(node Node, req *Request) (int64, bool)
	// Place returns where each slice goes, or an error when the request does not fit.
	Place(node Node, req *Request) ([]Assignment, error)
}

// PolicyKind is one of the built-in policies. Slicer is the default; FirstFit and DASLike are
// baselines kept for comparison.
type PolicyKind uint8

const (
	// Slicer is best fit with a fragmentation term: each slice goes to the (GPU, start) that
	// loses the least future placeability V, which prefers GPUs already in use and the start
	// that leaves the largest legal free blocks.
	Slicer PolicyKind = iota
	// FirstFit is the first node, first GPU and lowest legal start.
	FirstFit
	// DASLike is the node with the most free compute slices, the first GPU that fits, and the
	// first placement in NVML order.
	DASLike
)

var policyNames = [...]string{Slicer: "slicer", FirstFit: "first-fit", DASLike: "das-like"}

// PolicyNames lists the built-in policies.
func PolicyNames() []string { return append([]string(nil), policyNames[:]...) }

// ParsePolicy finds a built-in policy by name.
func ParsePolicy(name string) (PolicyKind, error) {
	for i, n := range policyNames {
		if n == name {
			return PolicyKind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown policy %q (known: %v)", name, policyNames)
}

// Name is the policy's name.
func (k PolicyKind) Name() string {
	if int(k) < len(policyNames) {
		return policyNames[k]
	}
	return fmt.Sprintf("PolicyKind(%d)", int(k))
}

// Score implements Policy.
func (k PolicyKind) Score(node Node, req *Request) (int64, bool) {
	var plan [MaxRequestSlices]Assignment
	cost, ok := k.plan(node, req, &plan)
	if !ok {
		return 0, false
	}
	switch k {
	case FirstFit:
		return MaxNodeScore, true
	case DASLike:
		free, total := 0, 0
		for _, g := range node.GPUs {
			if g.Usable && g.State.Valid() {
				free += g.State.FreeComputeSlices()
				total += g.State.model.ComputeSlices()
			}
		}
		return int64(free) * MaxNodeScore / int64(total), true
	}
	// cost is in millionths of a whole GPU's V, summed over the slices.
	s := MaxNodeScore - int64(math.Ceil(float64(cost)*float64(MaxNodeScore)/(1e6*float64(req.n))))
	return min(max(s, 0), MaxNodeScore), true
}

// Place implements Policy.
func (k PolicyKind) Place(node Node, req *Request) ([]Assignment, error) {
	var plan [MaxRequestSlices]Assignment
	if _, ok := k.plan(node, req, &plan); !ok {
		return nil, fmt.Errorf("request does not fit: %s", Explain(node, req))
	}
	out := make([]Assignment, req.n)
	copy(out, plan[:req.n])
	return out, nil
}

// Score is the default (Slicer) policy's score: see Policy.
func Score(node Node, req *Request) (int64, bool) { return Slicer.Score(node, req) }

// Place is the default (Slicer) policy's placement: see Policy.
func Place(node Node, req *Request) ([]Assignment, error) { return Slicer.Place(node, req) }

// plan places the request's slices one by one, largest first, on a private overlay of the
// node's states. It returns the summed cost (Slicer: V lost, in millionths of an empty GPU's V)
// and whether every slice found a place. It does not allocate.
func (k PolicyKind) plan(node Node, req *Request, out *[MaxRequestSlices]Assignment) (int64, bool) {
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
			st := int(stateOf(g))
			kidx := st*t.nprof() + int(p)
			var s int8
			var cost int64
			switch k {
			case Slicer:
				s = t.best[kidx]
				cost = int64(t.bestCost[kidx]) * 1e6 / int64(t.emptyValue)
			case FirstFit:
				s = t.firstSlot[kidx]
			default:
				s = t.nvmlSlot[kidx]
			}
			if s == noSlot {
				continue
			}
			if bestGPU < 0 || cost < bestCost {
				bestGPU, bestSlot, bestCost, bestT = g, int(s), cost, t
			}
			if k != Slicer {
				break // baselines take the first GPU that fits
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

// SelectNode is the simulator's stand-in for kube-scheduler's host selection: the feasible
// node with the highest score, the lowest index among equal scores. It returns -1 when no node
// fits.
func SelectNode(p Policy, nodes []Node, req *Request) int {
	best, bestScore := -1, int64(-1)
	for i := range nodes {
		if s, ok := p.Score(nodes[i], req); ok && s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
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
