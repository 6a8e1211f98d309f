package sim

import (
	"math"
	"reflect"
	"testing"

	"github.com/slicer-operator/slicer/internal/mig"
)

var testSlices = []SliceShare{
	{Profile: "1g.10gb", Share: 0.3}, {Profile: "2g.20gb", Share: 0.3}, {Profile: "3g.40gb", Share: 0.2},
	{Profile: "4g.40gb", Share: 0.1}, {Profile: "7g.80gb", Share: 0.1},
}

var testPods = []WholeShare{{GPUs: 1, Share: 0.4}, {GPUs: 2, Share: 0.3}, {GPUs: 4, Share: 0.2}, {GPUs: 8, Share: 0.1}}

func mixedSpec(nodes int, load float64, arrivals int, shares []float64, phase int, seed uint64) MixedSpec {
	return MixedSpec{
		Cluster: Cluster{Nodes: nodes, GPUsPerNode: 8, Model: "H100-80GB"},
		Load:    load, Arrivals: arrivals, Slices: testSlices, Whole: testPods,
		SliceLifetime: 1, WholeLifetime: 4, Shares: shares, Phase: phase, Seed: seed,
	}
}

// offeredByPhase sums, per phase of phase arrivals (the arrival's index), the compute × duration
// the trace offers: whole-GPU pods and slices apart.
func offeredByPhase(t *testing.T, tr *MixedTrace, phase int) (whole, slices []float64) {
	t.Helper()
	m, err := mig.ParseModel(tr.Cluster.Model)
	if err != nil {
		t.Fatal(err)
	}
	work, err := mixedWork(tr, m)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for _, e := range tr.Events {
		if e.Arrive == "" {
			continue
		}
		k := i / phase
		i++
		for len(whole) <= k {
			whole, slices = append(whole, 0), append(slices, 0)
		}
		w := work[e.Arrive]
		if e.Whole() {
			if e.GPUs != 1 && e.GPUs != 2 && e.GPUs != 4 && e.GPUs != 8 {
				t.Fatalf("pod %s of %d GPUs", e.Arrive, e.GPUs)
			}
			whole[k] += w.compute * w.duration
		} else {
			slices[k] += w.compute * w.duration
		}
	}
	return whole, slices
}

func TestGenerateMixedSteadyShares(t *testing.T) {
	for _, share := range []float64{0.2, 0.4, 0.6} {
		tr, err := GenerateMixed(mixedSpec(16, 0.9, 30000, []float64{share}, 0, 7))
		if err != nil {
			t.Fatal(err)
		}
		w, s := offeredByPhase(t, tr, 30000)
		if got := w[0] / (w[0] + s[0]); math.Abs(got-share) > 0.03 {
			t.Errorf("steady %g: whole-GPU share of the offered compute %.3f", share, got)
		}
		// Offered load: compute × duration over the arrivals' span, ÷ the cluster's compute.
		span := tr.Events[len(tr.Events)-1].T
		if load := (w[0] + s[0]) / span / float64(16*8*7); math.Abs(load-0.9) > 0.09 {
			t.Errorf("steady %g: offered load %.3f, want about 0.9", share, load)
		}
	}
}

func TestGenerateMixedShiftingShares(t *testing.T) {
	tr, err := GenerateMixed(mixedSpec(16, 1.1, 16000, []float64{0.1, 0.7}, 1000, 3))
	if err != nil {
		t.Fatal(err)
	}
	w, s := offeredByPhase(t, tr, 1000)
	if len(w) != 16 {
		t.Fatalf("%d phases, want 16", len(w))
	}
	var sum [2]float64
	for k := range w {
		sum[k%2] += w[k] / (w[k] + s[k])
	}
	if low := sum[0] / 8; math.Abs(low-0.1) > 0.04 {
		t.Errorf("mean whole-GPU share of the low phases %.3f, want about 0.1", low)
	}
	if high := sum[1] / 8; math.Abs(high-0.7) > 0.06 {
		t.Errorf("mean whole-GPU share of the high phases %.3f, want about 0.7", high)
	}
}

func TestGenerateMixedIsDeterministic(t *testing.T) {
	a, err := GenerateMixed(mixedSpec(4, 1, 500, []float64{0.4}, 0, 11))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenerateMixed(mixedSpec(4, 1, 500, []float64{0.4}, 0, 11))
	c, _ := GenerateMixed(mixedSpec(4, 1, 500, []float64{0.4}, 0, 12))
	if !reflect.DeepEqual(a, b) {
		t.Error("one seed gave two traces")
	}
	if reflect.DeepEqual(a, c) {
		t.Error("two seeds gave one trace")
	}
	for i := 1; i < len(a.Events); i++ {
		if a.Events[i].T < a.Events[i-1].T {
			t.Fatalf("event %d before event %d", i, i-1)
		}
	}
}

func TestGenerateMixedRefusesBadSpecs(t *testing.T) {
	bad := []func(*MixedSpec){
		func(s *MixedSpec) { s.Whole = []WholeShare{{GPUs: 9, Share: 1}} },
		func(s *MixedSpec) { s.Slices = []SliceShare{{Profile: "5g.50gb", Share: 1}} },
		func(s *MixedSpec) { s.Shares = nil },
		func(s *MixedSpec) { s.Shares = []float64{1} },
		func(s *MixedSpec) { s.Load = 0 },
	}
	for i, f := range bad {
		s := mixedSpec(2, 1, 10, []float64{0.5}, 0, 1)
		f(&s)
		if _, err := GenerateMixed(s); err == nil {
			t.Errorf("spec %d: no error", i)
		}
	}
}

// holderBook is the test's own record of who holds each GPU, built from the replay's decisions.
type holderBook struct {
	whole  map[[2]int]string // (node, GPU) -> whole-GPU pod
	slices map[[2]int]int    // (node, GPU) -> slices on it
	placed map[string]MixedStep
}

// check replays tr under opt and checks, after every event, that no GPU holds a whole-GPU pod
// and a slice at once, that every switch is of a GPU nobody holds, and that the replay's node
// snapshot agrees with the book. It returns the switches and the accepted arrivals per class.
func checkMixedInvariants(t *testing.T, tr *MixedTrace, opt MixedOptions) (switches int, accepted [2]int) {
	t.Helper()
	b := holderBook{whole: map[[2]int]string{}, slices: map[[2]int]int{}, placed: map[string]MixedStep{}}
	opt.Observe = func(st MixedStep) {
		t.Helper()
		e := st.Event
		switch {
		case e.Arrive != "" && st.Accepted:
			b.placed[e.Arrive] = st
			for _, g := range st.Switched {
				k := [2]int{st.Node, g}
				if b.whole[k] != "" || b.slices[k] > 0 {
					t.Fatalf("%s: switched GPU %v, held by %q and %d slices", e.Arrive, k, b.whole[k], b.slices[k])
				}
				if before := st.Before[g]; !before.State.IsEmpty() || before.InUse {
					t.Fatalf("%s: switched GPU %v that was not empty: %+v", e.Arrive, k, before)
				}
				switches++
			}
			if opt.Policy == StaticSplit && len(st.Switched) > 0 {
				t.Fatalf("%s: a static split switched GPUs %v", e.Arrive, st.Switched)
			}
			if e.Whole() {
				accepted[1]++
				if len(st.Whole) != e.GPUs {
					t.Fatalf("%s: %d GPUs for a pod of %d", e.Arrive, len(st.Whole), e.GPUs)
				}
				if opt.Policy == StaticSplit && st.Node < opt.MIGNodes {
					t.Fatalf("%s: a whole-GPU pod on MIG node %d", e.Arrive, st.Node)
				}
				for _, g := range st.Whole {
					k := [2]int{st.Node, g}
					if b.whole[k] != "" || b.slices[k] > 0 {
						t.Fatalf("%s: GPU %v already held by %q and %d slices", e.Arrive, k, b.whole[k], b.slices[k])
					}
					b.whole[k] = e.Arrive
				}
			} else {
				accepted[0]++
				if opt.Policy == StaticSplit && st.Node >= opt.MIGNodes {
					t.Fatalf("%s: a slice on whole-GPU node %d", e.Arrive, st.Node)
				}
				for _, a := range st.Slices {
					k := [2]int{st.Node, a.GPU}
					if b.whole[k] != "" {
						t.Fatalf("%s: slice on GPU %v held whole by %q", e.Arrive, k, b.whole[k])
					}
					b.slices[k]++
				}
			}
		case e.Depart != "":
			st, ok := b.placed[e.Depart]
			if !ok {
				break
			}
			delete(b.placed, e.Depart)
			for _, g := range st.Whole {
				delete(b.whole, [2]int{st.Node, g})
			}
			for _, a := range st.Slices {
				b.slices[[2]int{st.Node, a.GPU}]--
			}
		}
		for n, node := range st.Nodes {
			for g, gpu := range node.GPUs {
				k := [2]int{n, g}
				if gpu.InUse != (b.whole[k] != "") || gpu.State.IsEmpty() != (b.slices[k] == 0) {
					t.Fatalf("after %+v: GPU %v is %+v, the book says whole %q, %d slices", e, k, gpu, b.whole[k], b.slices[k])
				}
				if !gpu.State.IsEmpty() && (gpu.InUse || gpu.Mode != mig.ModeMIG) {
					t.Fatalf("after %+v: GPU %v holds slices in %s mode, in use %v", e, k, gpu.Mode, gpu.InUse)
				}
				if gpu.InUse && gpu.Mode != mig.ModeWhole {
					t.Fatalf("after %+v: GPU %v held whole in %s mode", e, k, gpu.Mode)
				}
			}
		}
	}
	if _, err := RunMixed(tr, opt); err != nil {
		t.Fatal(err)
	}
	return switches, accepted
}

func TestRunMixedInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		for _, shares := range [][]float64{{0.5}, {0.1, 0.7}} {
			tr, err := GenerateMixed(mixedSpec(3, 1.2, 1500, shares, 300, seed))
			if err != nil {
				t.Fatal(err)
			}
			for _, opt := range []MixedOptions{
				{Policy: OnePool, SwitchTime: 0.01},
				{Policy: OnePool, StartWhole: true},
				{Policy: OnePool, PackNodes: true, SwitchTime: 0.01},
				{Policy: StaticSplit, MIGNodes: 1},
				{Policy: StaticSplit, MIGNodes: 2},
			} {
				sw, acc := checkMixedInvariants(t, tr, opt)
				if acc[0] == 0 || acc[1] == 0 {
					t.Errorf("seed %d %v %+v: accepted %v: a class never placed, the check saw little", seed, shares, opt, acc)
				}
				if opt.Policy == OnePool && sw == 0 {
					t.Errorf("seed %d %v %+v: no switch, the switch check saw nothing", seed, shares, opt)
				}
			}
		}
	}
}

func TestRunMixedStaticEnds(t *testing.T) {
	tr, err := GenerateMixed(mixedSpec(2, 0.8, 400, []float64{0.4}, 0, 5))
	if err != nil {
		t.Fatal(err)
	}
	allMIG, err := RunMixed(tr, MixedOptions{Policy: StaticSplit, MIGNodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	allWhole, err := RunMixed(tr, MixedOptions{Policy: StaticSplit})
	if err != nil {
		t.Fatal(err)
	}
	if allMIG.WholeAccepted != 0 || allMIG.SliceAcceptance == 0 || allWhole.Accepted != allWhole.WholeAccepted || allWhole.WholeAcceptance == 0 {
		t.Errorf("all MIG %+v, all whole %+v", allMIG, allWhole)
	}
	if _, err := RunMixed(tr, MixedOptions{Policy: StaticSplit, MIGNodes: 3}); err == nil {
		t.Error("a split of 3 MIG nodes out of 2: no error")
	}
}

func TestRunMixedSwitchTimeCosts(t *testing.T) {
	tr, err := GenerateMixed(mixedSpec(3, 1, 1000, []float64{0.1, 0.7}, 200, 9))
	if err != nil {
		t.Fatal(err)
	}
	free, err := RunMixed(tr, MixedOptions{Policy: OnePool})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := RunMixed(tr, MixedOptions{Policy: OnePool, SwitchTime: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if free.Switches == 0 || free.SwitchLoss != 0 || free.SwitchingShare != 0 {
		t.Errorf("switch time 0: %+v", free)
	}
	// The decisions do not read the switch time: the same switches, paid for.
	if slow.Switches != free.Switches || slow.SwitchLoss <= 0 || slow.Acceptance >= free.Acceptance || slow.SwitchingShare <= 0 {
		t.Errorf("switch time 0.5: %+v against %+v", slow, free)
	}
	pool, err := RunMixedPool(tr)
	if err != nil {
		t.Fatal(err)
	}
	if pool.Acceptance <= 0 || pool.Acceptance > 1 || pool.WholeAcceptance <= 0 || pool.SliceAcceptance <= 0 {
		t.Errorf("pool %+v", pool)
	}
}
