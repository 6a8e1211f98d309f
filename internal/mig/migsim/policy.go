package migsim

import (
	"fmt"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Policy answers the scheduler's two questions. Score and Place share one code path, so Place
// succeeds exactly when Score reports the node feasible.
type Policy interface {
	Name() string
	// Score returns a score in [0, mig.MaxNodeScore] and whether the request fits on the node.
	// It does not allocate.
	Score(node mig.Node, req *mig.Request) (int64, bool)
	// Place returns where each slice goes, or an error when the request does not fit.
	Place(node mig.Node, req *mig.Request) ([]mig.Assignment, error)
}

// PolicyKind is one of the built-in policies: Slicer (the scheduler's, mig.Score and
// mig.Place) and two baselines kept for comparison.
type PolicyKind uint8

const (
	// Slicer is mig.Score and mig.Place: each slice goes to the (GPU, start) that loses the
	// least future placeability.
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
func (k PolicyKind) Score(node mig.Node, req *mig.Request) (int64, bool) {
	if k == Slicer {
		return mig.Score(node, req)
	}
	var plan [mig.MaxRequestSlices]mig.Assignment
	if !k.baseline(node, req, &plan) {
		return 0, false
	}
	if k == FirstFit {
		return mig.MaxNodeScore, true
	}
	free, total := 0, 0
	for _, g := range node.GPUs {
		if g.Usable && g.State.Valid() {
			free += g.State.FreeComputeSlices()
			total += g.State.Model().ComputeSlices()
		}
	}
	return int64(free) * mig.MaxNodeScore / int64(total), true
}

// Place implements Policy.
func (k PolicyKind) Place(node mig.Node, req *mig.Request) ([]mig.Assignment, error) {
	if k == Slicer {
		return mig.Place(node, req)
	}
	var plan [mig.MaxRequestSlices]mig.Assignment
	if !k.baseline(node, req, &plan) {
		return nil, fmt.Errorf("request does not fit: %s", mig.Explain(node, req))
	}
	return append([]mig.Assignment(nil), plan[:req.Len()]...), nil
}

// baseline places the request's slices one by one, largest first, on a private overlay of the
// node's states: each on the first usable GPU where it fits, at the lowest legal start
// (FirstFit) or the first in NVML order (DASLike). It reports whether every slice found a place.
// It does not allocate.
func (k PolicyKind) baseline(node mig.Node, req *mig.Request, out *[mig.MaxRequestSlices]mig.Assignment) bool {
	if req == nil || req.Len() == 0 {
		return false
	}
	var overlay [mig.MaxRequestSlices]struct {
		gpu   int
		state mig.GPUState
	}
	nover := 0
	stateOf := func(g int) (mig.GPUState, int) {
		for i := 0; i < nover; i++ {
			if overlay[i].gpu == g {
				return overlay[i].state, i
			}
		}
		return node.GPUs[g].State, -1
	}
	var buf [8]mig.Placement
	for i := 0; i < req.Len(); i++ {
		placed := false
		for g := range node.GPUs {
			gpu := &node.GPUs[g]
			if !gpu.Usable || !gpu.State.Valid() {
				continue
			}
			p, ok := req.Profile(i, gpu.State.Model())
			if !ok {
				continue
			}
			st, at := stateOf(g)
			cands := st.AppendCandidates(buf[:0], p)
			if len(cands) == 0 {
				continue
			}
			pl := cands[0]
			if k == FirstFit {
				for _, c := range cands[1:] {
					if c.Start < pl.Start {
						pl = c
					}
				}
			}
			next, _ := st.Take(p, pl)
			if at < 0 {
				at = nover
				overlay[at].gpu = g
				nover++
			}
			overlay[at].state = next
			out[i] = mig.Assignment{Slice: i, GPU: g, Profile: p, Placement: pl}
			placed = true
			break
		}
		if !placed {
			return false
		}
	}
	return true
}

// SelectNode is the simulator's stand-in for kube-scheduler's host selection: the feasible
// node with the highest score, the lowest index among equal scores. It returns -1 when no node
// fits.
func SelectNode(p Policy, nodes []mig.Node, req *mig.Request) int {
	best, bestScore := -1, int64(-1)
	for i := range nodes {
		if s, ok := p.Score(nodes[i], req); ok && s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}
