package migsim

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Transitional: PlanDefragChains answers as mig.PlanDefrag with Chains did.
func TestChainsAsBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 40))
	chains := 0
	for c := 0; c < 20000; c++ {
		models := caseModels(c)
		if c%5 == 4 {
			models = []mig.Model{mig.H100_80GB, mig.A100_40GB}
		}
		nodes, movable := randomCluster(rng, models, 1+rng.IntN(5), 1+rng.IntN(4), 0.5+rng.Float64()/2)
		req := upperRequest(rng, models[rng.IntN(len(models))])
		opt := mig.DefragOptions{MaxMoves: rng.IntN(5)}
		if c%3 == 1 {
			opt.RepackGPUs = 2 + rng.IntN(3)
		}
		if c%7 == 2 {
			opt.MaxRemovalSets = 1 + rng.IntN(5)
		}
		if c%9 == 3 {
			opt.Destinations = func(mig.SliceAt) func(int) bool { return func(n int) bool { return n%2 == 0 } }
		}
		got := PlanDefragChains(nodes, req, movableSet(movable), opt)
		opt.Chains = true
		want := mig.PlanDefrag(nodes, req, movableSet(movable), opt)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d (%s on %v, %+v):\n got %+v\nwant %+v", c, req.Slices()[0], nodes, opt, got, want)
		}
		if got.Plan.Ordered && !got.Plan.Repack {
			chains++
		}
	}
	t.Logf("%d chains", chains)
}

func TestChainsAsBeforeBenchShapes(t *testing.T) {
	h100 := func(ins ...mig.Instance) mig.GPU {
		s, err := mig.NewGPUState(mig.H100_80GB, ins)
		if err != nil {
			t.Fatal(err)
		}
		return mig.GPU{State: s, Usable: true}
	}
	for _, bc := range []struct {
		others []mig.Instance
		target mig.Instance
	}{
		{[]mig.Instance{{Profile: "4g.40gb", Placement: mig.Placement{Start: 0, Size: 4}}, {Profile: "1g.10gb", Placement: mig.Placement{Start: 4, Size: 1}}, {Profile: "1g.10gb", Placement: mig.Placement{Start: 6, Size: 1}}}, mig.Instance{Profile: "2g.20gb", Placement: mig.Placement{Start: 0, Size: 2}}},
		{[]mig.Instance{{Profile: "4g.40gb", Placement: mig.Placement{Start: 0, Size: 4}}, {Profile: "2g.20gb", Placement: mig.Placement{Start: 4, Size: 2}}}, mig.Instance{Profile: "2g.20gb", Placement: mig.Placement{Start: 0, Size: 2}}},
		{[]mig.Instance{{Profile: "4g.40gb", Placement: mig.Placement{Start: 0, Size: 4}}, {Profile: "2g.20gb", Placement: mig.Placement{Start: 4, Size: 2}}}, mig.Instance{Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}}},
	} {
		for _, at := range []int{0, 7, 30, 59} {
			nodes := make([]mig.Node, 60)
			for n := range nodes {
				nodes[n].GPUs = make([]mig.GPU, 8)
				for g := range nodes[n].GPUs {
					nodes[n].GPUs[g] = h100(bc.others...)
				}
			}
			nodes[at].GPUs[3] = h100(bc.target)
			req := mig.MustRequest(mig.RequestItem{Profile: "7g.80gb", Count: 1})
			all := func(int, int, mig.Profile, mig.Placement) bool { return true }
			got := PlanDefragChains(nodes, req, all, mig.DefragOptions{})
			want := mig.PlanDefrag(nodes, req, all, mig.DefragOptions{Chains: true})
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v at %d:\n got %+v\nwant %+v", bc.target, at, got, want)
			}
			t.Logf("%v at %d: %s ordered %v", bc.target, at, got.Outcome, got.Plan.Ordered)
		}
	}
}
