package migsim

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slicer-operator/slicer/internal/mig"
)

// randomItems is a batch of n slices of m's profiles drawn uniformly.
func randomItems(rng *rand.Rand, m mig.Model, n int) []mig.RequestItem {
	ps := m.Profiles()
	counts := make([]int, len(ps))
	for i := 0; i < n; i++ {
		counts[rng.IntN(len(ps))]++
	}
	var items []mig.RequestItem
	for i, c := range counts {
		if c > 0 {
			items = append(items, mig.RequestItem{Profile: ps[i].Name, Count: c})
		}
	}
	return items
}

// No policy packs a static batch on fewer GPUs than the exact optimum.
func TestPackStaticNeverBelowOptimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	for run := 0; run < 300; run++ {
		items := randomItems(rng, mig.H100_80GB, 1+rng.IntN(30))
		opt, _ := mig.Optimum(mig.H100_80GB, items)
		for _, pol := range allPolicies {
			used, err := PackStatic(pol, mig.H100_80GB, items)
			if err != nil || used < opt {
				t.Fatalf("%s %v: used %d < optimum %d (%v)", pol.Name(), items, used, opt, err)
			}
		}
	}
}

func TestStaticOrder(t *testing.T) {
	cases := []struct {
		name  string
		m     mig.Model
		items []mig.RequestItem
		want  []string
	}{
		{
			name:  "3g without a 4g is followed by the smalls that fill its other half",
			m:     mig.H100_80GB,
			items: []mig.RequestItem{{Profile: "1g.10gb", Count: 3}, {Profile: "2g.20gb", Count: 1}, {Profile: "3g.40gb", Count: 2}, {Profile: "7g.80gb", Count: 1}, {Profile: "1g.10gb+me", Count: 1}},
			want: []string{"1g.10gb+me", "7g.80gb", "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb",
				"3g.40gb", "1g.10gb"},
		},
		{
			name:  "3g pairing with a 4g takes no smalls",
			m:     mig.H100_80GB,
			items: []mig.RequestItem{{Profile: "1g.10gb", Count: 2}, {Profile: "3g.40gb", Count: 2}, {Profile: "4g.40gb", Count: 1}},
			want:  []string{"4g.40gb", "3g.40gb", "3g.40gb", "1g.10gb", "1g.10gb"},
		},
		{
			name:  "A30: 2g halves take the 1g smalls",
			m:     mig.A30_24GB,
			items: []mig.RequestItem{{Profile: "1g.6gb", Count: 3}, {Profile: "2g.12gb", Count: 2}, {Profile: "4g.24gb", Count: 1}},
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
	if _, err := StaticOrder(mig.H100_80GB, []mig.RequestItem{{Profile: "5g.50gb", Count: 1}}); err == nil {
		t.Error("StaticOrder accepted an unknown profile")
	}
}

// StaticOrder is a permutation of the batch, and on the instance where largest-first pairs two
// 3g (stranding a compute slice) the slicer policy now reaches the optimum.
func TestPackStaticOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 3))
	for run := 0; run < 200; run++ {
		items := randomItems(rng, mig.H100_80GB, 1+rng.IntN(30))
		order, err := StaticOrder(mig.H100_80GB, items)
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
	tight := []mig.RequestItem{{Profile: "1g.10gb", Count: 8}, {Profile: "1g.20gb", Count: 1}, {Profile: "2g.20gb", Count: 3}, {Profile: "3g.40gb", Count: 3}, {Profile: "4g.40gb", Count: 1}, {Profile: "7g.80gb", Count: 1}}
	opt, _ := mig.Optimum(mig.H100_80GB, tight)
	used, err := PackStatic(Slicer, mig.H100_80GB, tight)
	if err != nil || used != opt || opt != 5 {
		t.Errorf("PackStatic = %d, %v; optimum %d, want 5", used, err, opt)
	}
}
