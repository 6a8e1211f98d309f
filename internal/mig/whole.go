package mig

import (
	"fmt"
	"math/bits"
	"strings"
)

// Whole-GPU requests (nvidia.com/gpu: N) on one node, docs/design/whole-gpus.md. A set of N
// GPUs fits when every one is free in whole mode or empty, switchable and in MIG mode
// (WholeUse). Among the sets that fit the choice prefers, in this order:
//
//  1. the fewest MIG mode switches (GPUs already whole first);
//  2. the best-connected set: the highest weakest link between two of its GPUs, then the
//     highest sum of its pairs' links (no preference for N = 1);
//  3. the most room left: the highest sum of links between the free GPUs it leaves (an NVLink
//     pair stays whole for the next multi-GPU request);
//  4. the lowest GPU indices (the first set in lexicographic order of its sorted indices).
//
// The search is exact: a depth-first search over the GPUs that need the fewest switches, which
// prunes a branch whose weakest link or whose best possible pair sum is already below the best
// set found. A node whose free GPUs are all linked alike (no topology, one NVSwitch) has every
// set equal and takes the first.

// MaxWholeGPUs is the most whole GPUs one request may ask for.
const MaxWholeGPUs = 16

// WholeChoice is where a whole-GPU request goes on a node.
type WholeChoice struct {
	// GPUs are the chosen GPUs' indices in Node.GPUs, ascending.
	GPUs []int
	// Switch lists the chosen GPUs whose MIG mode must be switched off first, ascending.
	Switch []int
}

// wholeKey is a candidate set's rank under the preference order; better compares higher.
type wholeKey struct {
	switches int
	weakest  Link
	pairSum  int
	leftSum  int
}

func (k wholeKey) better(o wholeKey) bool {
	switch {
	case k.switches != o.switches:
		return k.switches < o.switches
	case k.weakest != o.weakest:
		return k.weakest > o.weakest
	case k.pairSum != o.pairSum:
		return k.pairSum > o.pairSum
	}
	return k.leftSum > o.leftSum
}

// wholeCandidates returns the masks of the GPUs ready as whole GPUs and of those usable after a
// switch, among the first maxTopologyGPUs.
func wholeCandidates(node Node) (ready, after uint32) {
	for g := range min(len(node.GPUs), maxTopologyGPUs) {
		switch node.GPUs[g].WholeUse() {
		case UseReady:
			ready |= 1 << g
		case UseAfterSwitch:
			after |= 1 << g
		}
	}
	return ready, after
}

// linksTo is Σ over the GPUs of set of their link rank to GPU g (g not in set); 0 without a
// topology.
func (t *Topology) linksTo(g int, set uint32) int {
	if t == nil {
		return 0
	}
	return bits.OnesCount32(t.bit0[g]&set) + 2*bits.OnesCount32(t.bit1[g]&set)
}

// weakestTo is the lowest link rank from GPU g to a GPU of set (g not in set); LinkNVLink
// when set is empty.
func (t *Topology) weakestTo(g int, set uint32) Link {
	if set == 0 {
		return LinkNVLink
	}
	if t == nil {
		return LinkOther
	}
	w := LinkNVLink
	for w > LinkOther && set&^t.atLeast[w][g] != 0 {
		w--
	}
	return w
}

// uniform reports whether every pair of GPUs of set has the same rank (true without a
// topology).
func (t *Topology) uniform(set uint32) bool {
	if t == nil {
		return true
	}
	for r := Link(1); r <= LinkNVLink; r++ {
		all, none := true, true
		for s := set; s != 0; s &= s - 1 {
			g := bits.TrailingZeros32(s)
			got := t.atLeast[r][g] & set
			all, none = all && got == set&^(1<<g), none && got == 0
		}
		if !all && !none {
			return false
		}
	}
	return true
}

// setKey is what chooseWhole ranks a set by, but its switches: its weakest link, its pair
// sum, and Σ over set of links to free GPUs.
func (t *Topology) setKey(set, free uint32) (weakest Link, pair, deg int) {
	weakest = LinkNVLink
	for f := set; f != 0; f &= f - 1 {
		g := bits.TrailingZeros32(f)
		weakest = min(weakest, t.weakestTo(g, set&^(1<<g)))
		pair += t.linksTo(g, set)
		deg += t.linksTo(g, free)
	}
	return weakest, pair / 2, deg
}

// wholeSearch is the state of chooseWhole's depth-first search.
type wholeSearch struct {
	topo     *Topology
	pool     [maxTopologyGPUs]uint8 // the GPUs to choose from, ascending
	npool    int
	free     uint32               // every GPU that can serve
	freeSum  int                  // Σ of the links between free GPUs
	deg      [maxTopologyGPUs]int // deg[g]: Σ of g's links to free GPUs
	switches int
	best     uint32
	bestKey  wholeKey
	found    bool
	work     int // sets visited, bounded by maxWholeWork
}

// maxWholeWork bounds the sets one search visits. An 8-GPU node needs at most a few hundred; a
// larger node whose free GPUs are linked unevenly may stop at the bound with the best set found
// so far (legal, deterministic, not proven best).
const maxWholeWork = 1 << 14

// visit extends set (of rank weakest, pair sum pair, Σ over set of links to free GPUs deg) with
// left more GPUs of pool[from:].
func (s *wholeSearch) visit(from, left int, set uint32, weakest Link, pair, deg int) {
	if left == 0 {
		// The links left among free GPUs: those not touching set.
		k := wholeKey{switches: s.switches, weakest: weakest, pairSum: pair, leftSum: s.freeSum - deg + pair}
		if !s.found || k.better(s.bestKey) {
			s.best, s.bestKey, s.found = set, k, true
		}
		return
	}
	size := bits.OnesCount32(set)
	for i := from; i+left <= s.npool; i++ {
		if s.work++; s.work > maxWholeWork && s.found {
			return
		}
		g := int(s.pool[i])
		w, p := weakest, pair
		if size > 0 {
			w = min(w, s.topo.weakestTo(g, set))
			p += s.topo.linksTo(g, set)
		}
		if s.found {
			// Adding GPUs never raises the weakest link; the pair sum grows by at most
			// LinkNVLink per new pair.
			if w < s.bestKey.weakest {
				continue
			}
			newPairs := (left-1)*(size+1) + (left-1)*(left-2)/2
			if w == s.bestKey.weakest && p+int(LinkNVLink)*newPairs < s.bestKey.pairSum {
				continue
			}
		}
		s.visit(i+1, left-1, set|1<<g, w, p, deg+s.deg[g])
	}
}

// chooseWhole is the whole-GPU choice: the chosen set's mask, its key and whether n GPUs fit. It
// does not allocate.
func chooseWhole(node Node, n int) (uint32, wholeKey, bool) {
	if n <= 0 || n > MaxWholeGPUs {
		return 0, wholeKey{}, false
	}
	ready, after := wholeCandidates(node)
	nr, na := bits.OnesCount32(ready), bits.OnesCount32(after)
	if n > nr+na {
		return 0, wholeKey{}, false
	}
	// Fewest switches: n of the ready GPUs when there are enough, else every ready one and the
	// rest from those that switch.
	fixed, pool, r := uint32(0), ready, n
	if n > nr {
		fixed, pool, r = ready, after, n-nr
	}
	topo := node.topology()
	s := wholeSearch{topo: topo, free: ready | after, switches: max(0, n-nr)}
	_, s.freeSum, _ = topo.setKey(s.free, s.free)
	if topo.uniform(s.free) {
		// Every set of r is equal: the first.
		set := fixed
		for p := pool; r > 0; p, r = p&(p-1), r-1 {
			set |= 1 << bits.TrailingZeros32(p)
		}
		w, pair, deg := topo.setKey(set, s.free)
		return set, wholeKey{switches: s.switches, weakest: w, pairSum: pair, leftSum: s.freeSum - deg + pair}, true
	}
	for p := pool; p != 0; p &= p - 1 {
		g := bits.TrailingZeros32(p)
		s.pool[s.npool] = uint8(g)
		s.npool++
		s.deg[g] = topo.linksTo(g, s.free)
	}
	weakest, pair, deg := topo.setKey(fixed, s.free)
	s.visit(0, r, fixed, weakest, pair, deg)
	return s.best, s.bestKey, s.found
}

// ScoreWhole is the scheduler's Filter and Score for a request of n whole GPUs: a score in [0,
// MaxNodeScore] of the choice PlaceWhole makes, and whether it fits. It does not allocate. The
// score starts at MaxNodeScore and loses up to wholeLeftWeight for the share of the node's GPUs
// left free for whole use (best fit across nodes: a busy or sliced node first, so that empty
// nodes stay whole for 4- and 8-GPU requests), up to wholeSwitchWeight for the share of the
// chosen GPUs that must switch mode, and up to wholeLinkWeight for the weakest link below
// LinkNVLink (n > 1). The GPUs left free weigh most: a switch takes seconds on Hopper, while a
// whole node broken by a 1-GPU pod strands an 8-GPU pod for hours (docs/design/whole-gpus.md).
func ScoreWhole(node Node, n int) (int64, bool) {
	set, k, ok := chooseWhole(node, n)
	if !ok {
		return 0, false
	}
	s := MaxNodeScore - ceilDiv(wholeSwitchWeight*int64(k.switches), int64(n))
	if n > 1 {
		s -= ceilDiv(wholeLinkWeight*int64(LinkNVLink-k.weakest), int64(LinkNVLink))
	}
	ready, after := wholeCandidates(node)
	left := bits.OnesCount32((ready | after) &^ set)
	s -= ceilDiv(wholeLeftWeight*int64(left), int64(len(node.GPUs)))
	return min(max(s, 0), MaxNodeScore), true
}

// ScoreWholeCount is ScoreWhole for a node whose GPUs Slicer does not manage (NVIDIA's device
// plugin serves them as nvidia.com/gpu), known only by how many it has and how many are free:
// the same best fit (up to wholeLeftWeight for the share left free), no switch, and for n > 1
// the weakest link unknown, so taken as LinkOther (a node whose links Slicer knows to be NVLink
// scores higher). It fits when n GPUs are free.
func ScoreWholeCount(gpus, free, n int) (int64, bool) {
	if n <= 0 || n > free || free > gpus {
		return 0, false
	}
	s := MaxNodeScore - ceilDiv(wholeLeftWeight*int64(free-n), int64(gpus))
	if n > 1 {
		s -= wholeLinkWeight
	}
	return min(max(s, 0), MaxNodeScore), true
}

// The weights of ScoreWhole's terms; they sum to MaxNodeScore.
const (
	wholeLeftWeight   = 80
	wholeSwitchWeight = 12
	wholeLinkWeight   = 8
)

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// PlaceWhole is the choice ScoreWhole scores, or an error saying why n whole GPUs do not fit.
func PlaceWhole(node Node, n int) (WholeChoice, error) {
	set, _, ok := chooseWhole(node, n)
	if !ok {
		return WholeChoice{}, fmt.Errorf("request does not fit: %s", ExplainWhole(node, n))
	}
	var c WholeChoice
	for s := set; s != 0; s &= s - 1 {
		g := bits.TrailingZeros32(s)
		c.GPUs = append(c.GPUs, g)
		if node.GPUs[g].WholeUse() == UseAfterSwitch {
			c.Switch = append(c.Switch, g)
		}
	}
	return c, nil
}

// ExplainWhole says why n whole GPUs do not fit on the node, "" when they do: how many GPUs are
// free in whole mode, how many could switch, and why each other GPU cannot serve. Off the hot
// path: it allocates.
func ExplainWhole(node Node, n int) string {
	if n <= 0 || n > MaxWholeGPUs {
		return fmt.Sprintf("a request for %d whole GPUs (1 to %d are supported)", n, MaxWholeGPUs)
	}
	if _, _, ok := chooseWhole(node, n); ok {
		return ""
	}
	ready, after := wholeCandidates(node)
	var b strings.Builder
	fmt.Fprintf(&b, "%d whole GPUs do not fit: %d of %d GPUs are free in whole mode, %d more could switch from MIG:",
		n, bits.OnesCount32(ready), len(node.GPUs), bits.OnesCount32(after))
	for g, gpu := range node.GPUs {
		if g >= maxTopologyGPUs {
			fmt.Fprintf(&b, " gpus %d and above are not considered", maxTopologyGPUs)
			break
		}
		fmt.Fprintf(&b, " gpu %d: %s", g, wholeWhyNot(gpu))
		if g < len(node.GPUs)-1 {
			b.WriteByte(';')
		}
	}
	return b.String()
}

// wholeWhyNot says how one GPU stands for a whole-GPU request.
func wholeWhyNot(g GPU) string {
	switch {
	case g.WholeUse() == UseReady:
		return "free"
	case g.WholeUse() == UseAfterSwitch:
		return "free after a switch from MIG"
	case !g.Usable:
		return "not usable (unhealthy or not managed by Slicer)"
	case g.InUse:
		return "in use"
	case g.Mode == ModeSwitching:
		return "MIG mode change pending"
	case !g.State.IsEmpty():
		return fmt.Sprintf("MIG slices in use (%d of %d memory slices)", g.State.UsedMemorySlices(), g.State.Model().MemorySlices())
	case !g.Switchable:
		return "MIG mode, not switchable"
	}
	return "unknown model"
}

// ApplyWhole takes the choice on the node's GPUs, in place (the caller's snapshot): each chosen
// GPU becomes ModeWhole and InUse. On error (a GPU that cannot serve) nothing changes.
func ApplyWhole(node Node, c WholeChoice) error {
	for _, g := range c.GPUs {
		if g < 0 || g >= len(node.GPUs) {
			return fmt.Errorf("whole GPU %d on a node with %d GPUs", g, len(node.GPUs))
		}
		if node.GPUs[g].WholeUse() == UseNo {
			return fmt.Errorf("GPU %d cannot serve a whole-GPU request: %s", g, wholeWhyNot(node.GPUs[g]))
		}
	}
	for _, g := range c.GPUs {
		node.GPUs[g].Mode, node.GPUs[g].InUse = ModeWhole, true
	}
	return nil
}
