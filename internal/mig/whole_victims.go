package mig

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Victim choice for a whole-GPU request (docs/design/whole-gpus.md, "Preemption"): which pods to
// evict so that n GPUs of one node are empty and may serve whole. A GPU is emptied only whole:
// every pod that holds it, a slice or the GPU itself, is a victim, and a pod that holds slices on
// two chosen GPUs is one victim. The answer is exact for up to maxExactWholeVictimGPUs candidate
// GPUs (every set of n of them is tried); past that the n cheapest GPUs alone are taken.

// maxExactWholeVictimGPUs bounds the exact search: C(16, 8) = 12,870 sets at most.
const maxExactWholeVictimGPUs = 16

// WholeVictimGPU is one GPU as whole-GPU preemption sees it.
type WholeVictimGPU struct {
	// Whole: once empty the GPU serves a whole-GPU request: it is usable and in whole mode, or
	// in MIG mode and Switchable.
	Whole bool
	// Switch: it is in MIG mode, to be switched out of it once empty.
	Switch bool
	// Holders are its MIG instances and whole-GPU holders (Instance unused), with their owners.
	Holders []Holder
}

// WholeVictimChoice is which GPUs a whole-GPU request takes once some owners are evicted.
type WholeVictimChoice struct {
	// GPUs are the chosen GPUs' indices, ascending.
	GPUs []int
	// Owners are the owners to evict, sorted; Priorities theirs, highest first.
	Owners     []string
	Priorities []int32
	// Switches is how many chosen GPUs must leave MIG mode; Leaving how many of their holders
	// are being released already (waited for, not evicted).
	Switches, Leaving int
	// Protected is how many of the owners a PodDisruptionBudget protects (Holder.Protected).
	Protected int
}

// Less orders choices from the cheapest: the fewest owners a PodDisruptionBudget protects (as
// DefaultPreemption's first rule between candidates: the fewest budget violations); then the
// fewest owners evicted; then the lowest priorities (highest first, as VictimChoice.Less); then
// the fewest switches; then the fewest leaving holders waited for; then the owner keys; then the
// lowest GPU indices.
func (c WholeVictimChoice) Less(o WholeVictimChoice) bool {
	if c.Protected != o.Protected {
		return c.Protected < o.Protected
	}
	if len(c.Owners) != len(o.Owners) {
		return len(c.Owners) < len(o.Owners)
	}
	if d := slices.Compare(c.Priorities, o.Priorities); d != 0 {
		return d < 0
	}
	if c.Switches != o.Switches {
		return c.Switches < o.Switches
	}
	if c.Leaving != o.Leaving {
		return c.Leaving < o.Leaving
	}
	if d := slices.Compare(c.Owners, o.Owners); d != 0 {
		return d < 0
	}
	return slices.Compare(c.GPUs, o.GPUs) < 0
}

// String is "GPUs [0 2] evicting [a b] (priorities [5 1])".
func (c WholeVictimChoice) String() string {
	return fmt.Sprintf("GPUs %v evicting [%s] (priorities %v)", c.GPUs, strings.Join(c.Owners, " "), c.Priorities)
}

// ChooseWholeVictims returns the cheapest way (WholeVictimChoice.Less) to empty n GPUs of gpus
// for a preemptor of priority preemptor, and false when fewer than n can be emptied: a GPU
// qualifies when it is Whole and each of its holders is leaving or has an owner that is not
// pinned and of lower priority.
func ChooseWholeVictims(gpus []WholeVictimGPU, n int, preemptor int32) (WholeVictimChoice, bool) {
	if n <= 0 {
		return WholeVictimChoice{}, false
	}
	type cand struct {
		gpu       int
		owners    map[string]int32
		protected map[string]bool
		leaving   int
	}
	var cands []cand
	for i, g := range gpus {
		if !g.Whole {
			continue
		}
		c, ok := cand{gpu: i, owners: map[string]int32{}, protected: map[string]bool{}}, true
		for _, h := range g.Holders {
			switch {
			case h.Leaving:
				c.leaving++
			case h.Owner == "" || h.Pinned || h.Priority >= preemptor:
				ok = false
			default:
				c.owners[h.Owner] = h.Priority
				c.protected[h.Owner] = c.protected[h.Owner] || h.Protected
			}
		}
		if ok {
			cands = append(cands, c)
		}
	}
	if len(cands) < n {
		return WholeVictimChoice{}, false
	}
	choiceOf := func(set []int) WholeVictimChoice {
		owners := map[string]int32{}
		protected := map[string]bool{}
		var ch WholeVictimChoice
		for _, k := range set {
			c := cands[k]
			ch.GPUs = append(ch.GPUs, c.gpu)
			ch.Leaving += c.leaving
			if gpus[c.gpu].Switch {
				ch.Switches++
			}
			for o, p := range c.owners {
				owners[o] = p
				protected[o] = protected[o] || c.protected[o]
			}
		}
		for _, p := range protected {
			if p {
				ch.Protected++
			}
		}
		for o := range owners {
			ch.Owners = append(ch.Owners, o)
		}
		sort.Strings(ch.Owners)
		for _, o := range ch.Owners {
			ch.Priorities = append(ch.Priorities, owners[o])
		}
		slices.SortFunc(ch.Priorities, func(a, b int32) int { return int(b) - int(a) })
		sort.Ints(ch.GPUs)
		return ch
	}
	if len(cands) > maxExactWholeVictimGPUs {
		// The n GPUs that are cheapest alone (a choice of legal GPUs, not proven the cheapest).
		idx := make([]int, len(cands))
		for k := range idx {
			idx[k] = k
		}
		alone := make([]WholeVictimChoice, len(cands))
		for k := range cands {
			alone[k] = choiceOf([]int{k})
		}
		sort.SliceStable(idx, func(a, b int) bool { return alone[idx[a]].Less(alone[idx[b]]) })
		return choiceOf(idx[:n]), true
	}
	var best WholeVictimChoice
	found := false
	set := make([]int, 0, n)
	var walk func(from int)
	walk = func(from int) {
		if len(set) == n {
			if ch := choiceOf(set); !found || ch.Less(best) {
				best, found = ch, true
			}
			return
		}
		for k := from; k <= len(cands)-(n-len(set)); k++ {
			set = append(set, k)
			walk(k + 1)
			set = set[:len(set)-1]
		}
	}
	walk(0)
	return best, found
}
