package mig

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
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
		for _, pol := range allPolicies {
			used, err := PackStatic(pol, H100_80GB, items)
			if err != nil || used < opt {
				t.Fatalf("%s %v: used %d < optimum %d (%v)", pol.Name(), items, used, opt, err)
			}
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

func TestStaticOrder(t *testing.T) {
	cases := []struct {
		name  string
		m     Model
		items []RequestItem
		want  []string
	}{
		{
			name:  "3g without a 4g is followed by the smalls that fill its other half",
			m:     H100_80GB,
			items: []RequestItem{{"1g.10gb", 3}, {"2g.20gb", 1}, {"3g.40gb", 2}, {"7g.80gb", 1}, {"1g.10gb+me", 1}},
			want: []string{"1g.10gb+me", "7g.80gb", "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb",
				"3g.40gb", "1g.10gb"},
		},
		{
			name:  "3g pairing with a 4g takes no smalls",
			m:     H100_80GB,
			items: []RequestItem{{"1g.10gb", 2}, {"3g.40gb", 2}, {"4g.40gb", 1}},
			want:  []string{"4g.40gb", "3g.40gb", "3g.40gb", "1g.10gb", "1g.10gb"},
		},
		{
			name:  "A30: 2g halves take the 1g smalls",
			m:     A30_24GB,
			items: []RequestItem{{"1g.6gb", 3}, {"2g.12gb", 2}, {"4g.24gb", 1}},
			want:  []string{"4g.24gb", "2g.12gb", "1g.6gb", "1g.6gb", "2g.12gb", "1g.6gb"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StaticOrder(tc.m, tc.items)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("StaticOrder (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := StaticOrder(H100_80GB, []RequestItem{{"5g.50gb", 1}}); err == nil {
		t.Error("StaticOrder accepted an unknown profile")
	}
}

// StaticOrder is a permutation of the batch, and on the instance where largest-first pairs two
// 3g (stranding a compute slice) the slicer policy now reaches the optimum.
func TestPackStaticOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 3))
	for run := 0; run < 200; run++ {
		items := randomItems(rng, H100_80GB, 1+rng.IntN(30))
		order, err := StaticOrder(H100_80GB, items)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{}
		for _, it := range items {
			want[it.Profile] += it.Count
		}
		got := map[string]int{}
		for _, name := range order {
			got[name]++
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%v: order is not a permutation (-want +got):\n%s", items, diff)
		}
	}
	tight := []RequestItem{{"1g.10gb", 8}, {"1g.20gb", 1}, {"2g.20gb", 3}, {"3g.40gb", 3}, {"4g.40gb", 1}, {"7g.80gb", 1}}
	opt, _ := Optimum(H100_80GB, tight)
	used, err := PackStatic(Slicer, H100_80GB, tight)
	if err != nil || used != opt || opt != 5 {
		t.Errorf("PackStatic = %d, %v; optimum %d, want 5", used, err, opt)
	}
}
