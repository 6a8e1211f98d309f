package mig

import (
	"math/rand/v2"
	"testing"
)

// bruteForce finds the fewest GPUs by trying every placement of every slice.
func bruteForce(m Model, items []RequestItem) int {
	var ps []Profile
	for _, it := range items {
		p, _ := m.Profile(it.Profile)
		for i := 0; i < it.Count; i++ {
			ps = append(ps, p)
		}
	}
	for k := 1; ; k++ {
		gpus := make([]GPUState, k)
		for i := range gpus {
			gpus[i] = EmptyGPU(m)
		}
		var place func(i, opened int) bool
		place = func(i, opened int) bool {
			if i == len(ps) {
				return true
			}
			for g := 0; g < k && g <= opened; g++ {
				for _, pl := range gpus[g].Candidates(ps[i]) {
					prev := gpus[g]
					gpus[g], _ = prev.Take(ps[i], pl)
					if place(i+1, max(opened, g+1)) {
						return true
					}
					gpus[g] = prev
				}
			}
			return false
		}
		if place(0, 0) {
			return k
		}
	}
}

func randomItems(rng *rand.Rand, m Model, n int) []RequestItem {
	ps := m.Profiles()
	counts := make([]int, len(ps))
	for i := 0; i < n; i++ {
		counts[rng.IntN(len(ps))]++
	}
	var items []RequestItem
	for i, c := range counts {
		if c > 0 {
			items = append(items, RequestItem{Profile: ps[i].Name, Count: c})
		}
	}
	return items
}

// designBound is docs/design/geometry.md's formula, for 8-slice models.
func designBound(m Model, items []RequestItem) int {
	var n7, n4, n3, n2, nme, c, mem int
	for _, it := range items {
		p, _ := m.Profile(it.Profile)
		c += p.ComputeSlices * it.Count
		mem += p.MemorySlices * it.Count
		switch {
		case p.MediaExtensions:
			nme += it.Count
		case p.ComputeSlices == 7:
			n7 += it.Count
		case p.ComputeSlices == 4:
			n4 += it.Count
		case p.ComputeSlices == 3:
			n3 += it.Count
		case p.ComputeSlices == 2:
			n2 += it.Count
		}
	}
	ceil := func(a, b int) int { return (a + b - 1) / b }
	return max(ceil(c, 7), ceil(mem, 8), n7+max(n4, ceil(n3+n4, 2)), ceil(n2+2*n4+n3+3*n7, 3), nme)
}

func TestOptimumAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, m := range []Model{A30_24GB, A100_40GB, H100_80GB} {
		for run := 0; run < 120; run++ {
			items := randomItems(rng, m, 1+rng.IntN(7))
			opt, err := Optimum(m, items)
			if err != nil {
				t.Fatal(err)
			}
			if bf := bruteForce(m, items); bf != opt {
				t.Fatalf("%s %v: Optimum %d, brute force %d", m, items, opt, bf)
			}
			lb, _ := LowerBound(m, items)
			if lb > opt {
				t.Fatalf("%s %v: lower bound %d > optimum %d", m, items, lb, opt)
			}
		}
	}
}

func TestLowerBoundNeverAboveOptimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	for run := 0; run < 300; run++ {
		items := randomItems(rng, H100_80GB, 1+rng.IntN(30))
		opt, _ := Optimum(H100_80GB, items)
		lb, _ := LowerBound(H100_80GB, items)
		if d := designBound(H100_80GB, items); lb < d || lb > opt {
			t.Fatalf("%v: design bound %d <= lower bound %d <= optimum %d does not hold", items, d, lb, opt)
		}
	}
}

func TestBoundExamples(t *testing.T) {
	cases := []struct {
		items   []RequestItem
		lb, opt int
	}{
		{[]RequestItem{{"7g.80gb", 2}}, 2, 2},
		{[]RequestItem{{"4g.40gb", 2}, {"3g.40gb", 2}}, 2, 2},
		{[]RequestItem{{"4g.40gb", 1}, {"3g.40gb", 3}}, 2, 2},
		{[]RequestItem{{"1g.10gb", 7}, {"1g.10gb+me", 1}}, 2, 2},
		{[]RequestItem{{"2g.20gb", 4}}, 2, 2},
		{[]RequestItem{{"1g.20gb", 4}, {"1g.10gb", 1}}, 2, 2},
	}
	for _, tc := range cases {
		lb, _ := LowerBound(H100_80GB, tc.items)
		opt, _ := Optimum(H100_80GB, tc.items)
		if lb != tc.lb || opt != tc.opt {
			t.Errorf("%v: lb %d opt %d, want %d %d", tc.items, lb, opt, tc.lb, tc.opt)
		}
	}
	if _, err := Optimum(H100_80GB, []RequestItem{{"1g.10gb", MaxExactRequests + 1}}); err == nil {
		t.Error("Optimum accepted an instance over the limit")
	}
}
