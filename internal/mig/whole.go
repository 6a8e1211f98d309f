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
//  4. the lowest GPU indices (the smallest bit mask).

// MaxWholeGPUs is the most whole GPUs one request may ask for.
const MaxWholeGPUs = 16

// maxWholeSubsets bounds the exact search; a larger one (nodes of more than 8 candidate GPUs)
// is chosen greedily, see greedyWhole.
const maxWholeSubsets = 4096

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

// linkLevels holds, per link rank r in 1..LinkNVLink, the mask of the GPUs each GPU links to at
// rank r or better. Sums of links over a set are popcounts of these masks.
type linkLevels [LinkNVLink + 1][maxTopologyGPUs]uint32

func (l *linkLevels) build(node Node, candidates uint32) {
	for a := range min(len(node.GPUs), maxTopologyGPUs) {
		if candidates&(1<<a) == 0 {
			continue
		}
		for b := range min(len(node.GPUs), maxTopologyGPUs) {
			if b == a || candidates&(1<<b) == 0 {
				continue
			}
			for r := Link(1); r <= node.link(a, b); r++ {
				l[r][a] |= 1 << b
			}
		}
	}
}

// pairSum is Σ over unordered pairs of set of their link rank.
func (l *linkLevels) pairSum(set uint32) int {
	n := 0
	for r := Link(1); r <= LinkNVLink; r++ {
		for s := set; s != 0; s &= s - 1 {
			n += bits.OnesCount32(l[r][bits.TrailingZeros32(s)] & set)
		}
	}
	return n / 2
}

// weakest is the lowest link rank between two GPUs of set; LinkNVLink for a set of one.
func (l *linkLevels) weakest(set uint32) Link {
	w := LinkNVLink
	for w > LinkOther {
		all := true
		for s := set; s != 0 && all; s &= s - 1 {
			g := bits.TrailingZeros32(s)
			all = (l[w][g]|1<<g)&set == set
		}
		if all {
			break
		}
		w--
	}
	return w
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
	var levels linkLevels
	levels.build(node, ready|after)
	free := ready | after
	key := func(set uint32) wholeKey {
		k := wholeKey{switches: bits.OnesCount32(set & after), weakest: levels.weakest(set),
			pairSum: levels.pairSum(set), leftSum: levels.pairSum(free &^ set)}
		return k
	}
	k := bits.OnesCount32(pool)
	if binomial(k, r) > maxWholeSubsets {
		set := greedyWhole(&levels, fixed, pool, r)
		return set, key(set), true
	}
	// Every r-subset of pool's k members, as r-subsets of 0..k-1 in increasing order (Gosper's
	// hack), mapped onto pool's bits.
	var members [maxTopologyGPUs]uint8
	for i, s := 0, pool; s != 0; i, s = i+1, s&(s-1) {
		members[i] = uint8(bits.TrailingZeros32(s))
	}
	var best uint32
	var bestKey wholeKey
	found := false
	for c := uint64(1)<<r - 1; c < 1<<k; {
		set := fixed
		for s := c; s != 0; s &= s - 1 {
			set |= 1 << members[bits.TrailingZeros64(s)]
		}
		if kk := key(set); !found || kk.better(bestKey) {
			best, bestKey, found = set, kk, true
		}
		if r == 0 {
			break
		}
		low := c & -c
		ripple := c + low
		c = ripple | ((c^ripple)>>2)/low
	}
	return best, bestKey, found
}

// greedyWhole chooses r GPUs of pool beside fixed one at a time, each the one that keeps the
// set's weakest link and then its pair sum highest (lowest index on ties). Only for searches
// over maxWholeSubsets; not optimal in general.
func greedyWhole(levels *linkLevels, fixed, pool uint32, r int) uint32 {
	set := fixed
	for ; r > 0; r-- {
		var pick uint32
		var pickW Link
		pickSum := -1
		for s := pool &^ set; s != 0; s &= s - 1 {
			g := uint32(1) << bits.TrailingZeros32(s)
			w, sum := levels.weakest(set|g), levels.pairSum(set|g)
			if pickSum < 0 || w > pickW || (w == pickW && sum > pickSum) {
				pick, pickW, pickSum = g, w, sum
			}
		}
		set |= pick
	}
	return set
}

// binomial is C(n, k), saturating above maxWholeSubsets.
func binomial(n, k int) int {
	if k < 0 || k > n {
		return 0
	}
	c := 1
	for i := 1; i <= k; i++ {
		c = c * (n - k + i) / i
		if c > maxWholeSubsets {
			return maxWholeSubsets + 1
		}
	}
	return c
}

// ScoreWhole is the scheduler's Filter and Score for a request of n whole GPUs: a score in [0,
// MaxNodeScore] of the choice PlaceWhole makes, and whether it fits. It does not allocate. The
// score starts at MaxNodeScore and loses up to 50 for the share of the chosen GPUs that must
// switch mode, up to 30 for the weakest link below LinkNVLink (n > 1), and up to 20 for the
// share of the node's GPUs left free for whole use (best fit: busy nodes first, empty nodes
// stay empty for large requests).
func ScoreWhole(node Node, n int) (int64, bool) {
	set, k, ok := chooseWhole(node, n)
	if !ok {
		return 0, false
	}
	s := MaxNodeScore - ceilDiv(50*int64(k.switches), int64(n))
	if n > 1 {
		s -= ceilDiv(30*int64(LinkNVLink-k.weakest), int64(LinkNVLink))
	}
	ready, after := wholeCandidates(node)
	left := bits.OnesCount32((ready | after) &^ set)
	s -= ceilDiv(20*int64(left), int64(len(node.GPUs)))
	return min(max(s, 0), MaxNodeScore), true
}

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
