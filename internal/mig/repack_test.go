package mig

import (
	"math/rand/v2"
	"testing"
)

// TestPackExactAgainstOptimum: on random batches of every model PackExact fits exactly when
// the optimum is at most the GPUs given, and the states it returns are legal, at most that
// many, and hold the batch exactly.
func TestPackExactAgainstOptimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 11))
	for _, m := range []Model{A30_24GB, A100_40GB, H100_80GB} {
		for run := 0; run < 200; run++ {
			items := randomItems(rng, m, 1+rng.IntN(25))
			opt, err := Optimum(m, items)
			if err != nil {
				t.Fatal(err)
			}
			for _, gpus := range []int{opt - 1, opt, opt + 1} {
				states, fits, exhausted, err := PackExact(m, items, gpus, 1<<20)
				if err != nil || exhausted {
					t.Fatalf("%s %v on %d GPUs: err %v, exhausted %v", m, items, gpus, err, exhausted)
				}
				if fits != (gpus >= opt) {
					t.Fatalf("%s %v on %d GPUs: fits %v, optimum %d", m, items, gpus, fits, opt)
				}
				if fits {
					checkHolds(t, m, items, states, gpus)
				}
			}
		}
	}
}

func checkHolds(t *testing.T, m Model, items []RequestItem, states []GPUState, gpus int) {
	t.Helper()
	if len(states) > gpus {
		t.Fatalf("%v: %d states for %d GPUs", items, len(states), gpus)
	}
	want := map[string]int{}
	for _, it := range items {
		p, _ := m.Profile(it.Profile)
		want[p.Name] += it.Count
	}
	for _, st := range states {
		if st.Model() != m {
			t.Fatalf("state of model %s, want %s", st.Model(), m)
		}
		again, err := NewGPUState(m, st.Instances())
		if err != nil || again != st {
			t.Fatalf("state %v is not legal: %v", st, err)
		}
		for _, in := range st.Instances() {
			want[in.Profile]--
		}
	}
	for name, n := range want {
		if n != 0 {
			t.Fatalf("%v: the states hold %d too few %s", items, n, name)
		}
	}
}

// TestPackExactAtClusterScale: a nearly full 64-GPU cluster's running slices (a state
// bench/packing's small-heavy trace reached at load 1.1, where neither two moves nor the
// offline packer placed the next arrival) fit exactly, far beyond Optimum's 40 slices, and so
// do two 7g.80gb more; three more do not (450 compute slices, 448 on 64 GPUs); a tiny work
// bound says so instead of guessing.
func TestPackExactAtClusterScale(t *testing.T) {
	items := []RequestItem{{"1g.10gb", 134}, {"1g.20gb", 37}, {"2g.20gb", 39}, {"3g.40gb", 20}, {"4g.40gb", 16}, {"7g.80gb", 8}}
	states, fits, exhausted, err := PackExact(H100_80GB, items, 64, 100000)
	if err != nil || exhausted || !fits {
		t.Fatalf("fits %v exhausted %v err %v", fits, exhausted, err)
	}
	checkHolds(t, H100_80GB, items, states, 64)
	for more, want := range map[int]bool{2: true, 3: false} {
		with := append(append([]RequestItem(nil), items...), RequestItem{"7g.80gb", more})
		states, fits, exhausted, err := PackExact(H100_80GB, with, 64, 100000)
		if err != nil || exhausted || fits != want {
			t.Fatalf("%d 7g.80gb more: fits %v exhausted %v err %v", more, fits, exhausted, err)
		}
		if fits {
			checkHolds(t, H100_80GB, with, states, 64)
		}
	}
	if _, fits, exhausted, _ := PackExact(H100_80GB, items, 64, 3); fits || !exhausted {
		t.Fatalf("work 3: fits %v exhausted %v, want out of work", fits, exhausted)
	}
	if _, _, _, err := PackExact(H100_80GB, []RequestItem{{"1g.10gb", 256}}, 64, 10); err == nil {
		t.Fatal("256 slices of one profile: no error")
	}
}
