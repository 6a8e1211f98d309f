package mig

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func TestChooseWholeVictims(t *testing.T) {
	h := func(owner string, prio int32) Holder { return Holder{Owner: owner, Priority: prio} }
	for _, tc := range []struct {
		name string
		gpus []WholeVictimGPU
		n    int
		want string // "" when none
	}{
		{name: "the GPU with one victim, not the one with two",
			gpus: []WholeVictimGPU{{Whole: true, Switch: true, Holders: []Holder{h("a", 1), h("b", 1)}}, {Whole: true, Switch: true, Holders: []Holder{h("c", 1)}}},
			n:    1, want: "GPUs [1] evicting [c] (priorities [1])"},
		{name: "one pod on two GPUs is one victim",
			gpus: []WholeVictimGPU{{Whole: true, Holders: []Holder{h("a", 1)}}, {Whole: true, Holders: []Holder{h("a", 1)}}, {Whole: true, Holders: []Holder{h("b", 1)}}},
			n:    2, want: "GPUs [0 1] evicting [a] (priorities [1])"},
		{name: "lower priorities first",
			gpus: []WholeVictimGPU{{Whole: true, Holders: []Holder{h("a", 5)}}, {Whole: true, Holders: []Holder{h("b", 2)}}},
			n:    1, want: "GPUs [1] evicting [b] (priorities [2])"},
		{name: "a GPU already whole before one to switch",
			gpus: []WholeVictimGPU{{Whole: true, Switch: true, Holders: []Holder{h("a", 1)}}, {Whole: true, Holders: []Holder{h("b", 1)}}},
			n:    1, want: "GPUs [1] evicting [b] (priorities [1])"},
		{name: "a holder of equal priority, a pinned one and one of no pod keep their GPUs",
			gpus: []WholeVictimGPU{{Whole: true, Holders: []Holder{h("a", 9)}}, {Whole: true, Holders: []Holder{{Owner: "b", Priority: 1, Pinned: true}}},
				{Whole: true, Holders: []Holder{{Priority: 1}}}, {Whole: true, Holders: []Holder{h("d", 1)}}},
			n: 1, want: "GPUs [3] evicting [d] (priorities [1])"},
		{name: "a GPU that may not switch is never emptied for it",
			gpus: []WholeVictimGPU{{Holders: []Holder{h("a", 1)}}, {Whole: true, Holders: []Holder{h("b", 1)}}}, n: 2},
		{name: "two unprotected victims before one a budget protects",
			gpus: []WholeVictimGPU{{Whole: true, Holders: []Holder{{Owner: "a", Priority: 1, Protected: true}}}, {Whole: true, Holders: []Holder{h("b", 1), h("c", 1)}}},
			n:    1, want: "GPUs [1] evicting [b c] (priorities [1 1])"},
		{name: "a protected victim when nothing else frees the GPUs",
			gpus: []WholeVictimGPU{{Whole: true, Holders: []Holder{{Owner: "a", Priority: 1, Protected: true}}}, {Whole: true, Holders: []Holder{h("b", 1)}}},
			n:    2, want: "GPUs [0 1] evicting [a b] (priorities [1 1])"},
		{name: "leaving holders free at no cost",
			gpus: []WholeVictimGPU{{Whole: true, Holders: []Holder{{Owner: "a", Priority: 1, Leaving: true}}}, {Whole: true, Holders: []Holder{h("b", 1)}}},
			n:    1, want: "GPUs [0] evicting [] (priorities [])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ChooseWholeVictims(tc.gpus, tc.n, 9)
			if s := got.String(); ok != (tc.want != "") || (ok && s != tc.want) {
				t.Errorf("ChooseWholeVictims = %s, %v; want %q", s, ok, tc.want)
			}
		})
	}
}

// Against an oracle that tries every set of owners to evict: the choice frees its GPUs with
// exactly the owners it names, and no set of owners that frees n GPUs costs less.
func TestChooseWholeVictimsAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 4))
	const preemptor = 5
	for round := range 3000 {
		nGPU, nOwner := 1+r.IntN(6), 1+r.IntN(5)
		prio := make([]int32, nOwner)
		protected := make([]bool, nOwner)
		for o := range prio {
			prio[o] = int32(r.IntN(7)) // some at or above the preemptor's
			protected[o] = r.IntN(4) == 0
		}
		gpus := make([]WholeVictimGPU, nGPU)
		for i := range gpus {
			gpus[i].Whole = r.IntN(5) > 0
			gpus[i].Switch = r.IntN(2) == 0
			for range r.IntN(3) {
				o := r.IntN(nOwner)
				gpus[i].Holders = append(gpus[i].Holders, Holder{Owner: fmt.Sprint("p", o), Priority: prio[o], Leaving: r.IntN(8) == 0, Protected: protected[o]})
			}
		}
		n := 1 + r.IntN(nGPU)
		freed := func(evict map[string]bool) []int {
			var out []int
			for i, g := range gpus {
				ok := g.Whole
				for _, h := range g.Holders {
					ok = ok && (h.Leaving || (evict[h.Owner] && h.Priority < preemptor))
				}
				if ok {
					out = append(out, i)
				}
			}
			return out
		}
		type cost struct {
			protected, n int
			prios        []int32
		}
		var best *cost
		for sub := 0; sub < 1<<nOwner; sub++ {
			evict := map[string]bool{}
			var ps []int32
			prot := 0
			for o := range nOwner {
				if sub&(1<<o) != 0 {
					evict[fmt.Sprint("p", o)] = true
					ps = append(ps, prio[o])
					if protected[o] {
						prot++
					}
				}
			}
			if len(freed(evict)) < n {
				continue
			}
			slices.SortFunc(ps, func(a, b int32) int { return int(b) - int(a) })
			c := cost{prot, len(ps), ps}
			if best == nil || c.protected < best.protected || c.protected == best.protected && (c.n < best.n || (c.n == best.n && slices.Compare(c.prios, best.prios) < 0)) {
				best = &c
			}
		}
		got, ok := ChooseWholeVictims(gpus, n, preemptor)
		if ok != (best != nil) {
			t.Fatalf("round %d: found %v, oracle %v (gpus %+v, n %d)", round, ok, best != nil, gpus, n)
		}
		if !ok {
			continue
		}
		if got.Protected != best.protected || len(got.Owners) != best.n || slices.Compare(got.Priorities, best.prios) != 0 {
			t.Fatalf("round %d: %s; oracle evicts %d with priorities %v (gpus %+v, n %d)", round, got, best.n, best.prios, gpus, n)
		}
		evict := map[string]bool{}
		for _, o := range got.Owners {
			evict[o] = true
		}
		free := freed(evict)
		for _, g := range got.GPUs {
			if !slices.Contains(free, g) {
				t.Fatalf("round %d: %s: GPU %d is not emptied by its owners", round, got, g)
			}
		}
		if len(got.GPUs) != n || !sort.IntsAreSorted(got.GPUs) {
			t.Fatalf("round %d: %s: want %d GPUs, sorted", round, got, n)
		}
	}
}
