package migsim

import (
	"math/rand/v2"
	"testing"

	"github.com/slicer-operator/slicer/internal/mig"
)

var allPolicies = []PolicyKind{Slicer, FirstFit, DASLike}

// arriveDepart drives random arrivals and departures from a byte stream through a policy:
// Score and Place agree on every node, nothing lands on an unusable GPU, the placement chosen
// is legal (mig.Apply takes it), and what a GPU then reports rebuilds it (internal/mig's own
// property test checks the states against invariants of their own).
func arriveDepart(t testing.TB, pol PolicyKind, m mig.Model, ops []byte) {
	profiles := m.Profiles()
	nodes := make([]mig.Node, 2)
	for i := range nodes {
		nodes[i].GPUs = make([]mig.GPU, 3)
		for g := range nodes[i].GPUs {
			nodes[i].GPUs[g] = mig.GPU{State: mig.EmptyGPU(m), Usable: i != 1 || g != 2}
		}
	}
	type placed struct {
		node int
		as   []mig.Assignment
	}
	var live []placed
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i], int(ops[i+1])
		if op%4 == 0 && len(live) > 0 {
			k := arg % len(live)
			for _, a := range live[k].as {
				g := &nodes[live[k].node].GPUs[a.GPU]
				s, err := g.State.Release(a.Profile, a.Placement)
				if err != nil {
					t.Fatalf("release: %v", err)
				}
				g.State = s
			}
			live = append(live[:k], live[k+1:]...)
			continue
		}
		items := []mig.RequestItem{{Profile: profiles[arg%len(profiles)].Name, Count: 1}}
		if op%7 == 1 {
			items = append(items, mig.RequestItem{Profile: profiles[(arg/7)%len(profiles)].Name, Count: 1 + int(op)%3})
		}
		req, err := mig.NewRequest(items...)
		if err != nil {
			t.Fatal(err)
		}
		for n := range nodes {
			_, ok := pol.Score(nodes[n], req)
			as, err := pol.Place(nodes[n], req)
			if ok != (err == nil) {
				t.Fatalf("node %d: Score feasible=%v but Place err=%v", n, ok, err)
			}
			if ok && len(as) != req.Len() {
				t.Fatalf("node %d: feasible but %d assignments", n, len(as))
			}
			// Explain replays the Slicer policy: a multi-slice request a baseline fits can
			// fail Slicer's greedy order, so Explain agrees with Slicer's Score only.
			if _, sok := mig.Score(nodes[n], req); sok != (mig.Explain(nodes[n], req) == "") {
				t.Fatalf("node %d: Slicer feasible=%v but Explain says %q", n, sok, mig.Explain(nodes[n], req))
			}
			for _, a := range as {
				if !nodes[n].GPUs[a.GPU].Usable {
					t.Fatalf("placed on an unusable GPU")
				}
			}
		}
		n := SelectNode(pol, nodes, req)
		if n < 0 {
			continue
		}
		as, _ := pol.Place(nodes[n], req)
		if err := mig.Apply(nodes[n], as); err != nil {
			t.Fatalf("apply: %v", err)
		}
		live = append(live, placed{n, as})
		for g, gpu := range nodes[n].GPUs {
			if again, err := mig.NewGPUState(m, gpu.State.Instances()); err != nil || again != gpu.State {
				t.Fatalf("gpu %d: rebuild = %v, %v; want %v", g, again, err, gpu.State)
			}
		}
	}
}

func TestArriveDepartProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, m := range []mig.Model{mig.A30_24GB, mig.A100_40GB, mig.H100_80GB} {
		for _, pol := range allPolicies {
			for run := 0; run < 30; run++ {
				ops := make([]byte, 400)
				for i := range ops {
					ops[i] = byte(rng.IntN(256))
				}
				arriveDepart(t, pol, m, ops)
			}
		}
	}
}

func FuzzArriveDepart(f *testing.F) {
	f.Add(uint8(0), uint8(3), []byte{1, 6, 1, 0, 1, 0, 0, 0, 1, 4, 1, 5})
	f.Add(uint8(1), uint8(0), []byte{8, 2, 8, 2, 8, 2, 0, 1, 1, 3, 1, 4, 15, 9, 0, 0})
	f.Add(uint8(2), uint8(7), []byte{1, 1, 1, 1, 1, 1, 1, 1, 4, 0, 1, 2})
	models := mig.Models()
	f.Fuzz(func(t *testing.T, pol, model uint8, ops []byte) {
		arriveDepart(t, allPolicies[int(pol)%len(allPolicies)], models[int(model)%len(models)], ops)
	})
}

func TestScoreRangeAndAllocs(t *testing.T) {
	req := mig.MustRequest(mig.RequestItem{Profile: "1g.10gb", Count: 2}, mig.RequestItem{Profile: "3g.40gb", Count: 1})
	empty := mig.Node{GPUs: []mig.GPU{{State: mig.EmptyGPU(mig.H100_80GB), Usable: true}}}
	half, _ := mig.NewGPUState(mig.H100_80GB, []mig.Instance{{Profile: "3g.40gb", Placement: mig.Placement{Start: 0, Size: 4}}})
	used := mig.Node{GPUs: []mig.GPU{{State: half, Usable: true}, {State: mig.EmptyGPU(mig.H100_80GB), Usable: true}}}
	for _, pol := range allPolicies {
		for _, n := range []mig.Node{empty, used} {
			s, ok := pol.Score(n, req)
			if !ok || s < 0 || s > mig.MaxNodeScore {
				t.Errorf("%s: score %d, %v", pol.Name(), s, ok)
			}
			var p Policy = pol
			if a := testing.AllocsPerRun(100, func() { p.Score(n, req) }); a != 0 {
				t.Errorf("%s: Score allocates %v times", pol.Name(), a)
			}
		}
	}
}

// The stock allocator's first fitting device in NameOrder is FirstFit's for a one-slice
// request: the published order carries the policy (internal/mig's test has PreferredOrder and
// the Slicer policy).
func TestNameOrderIsFirstFit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, m := range []mig.Model{mig.H100_80GB, mig.A100_40GB, mig.H200_141GB} {
		for range 400 {
			nodes, _ := randomCluster(rng, []mig.Model{m}, 1, 1+rng.IntN(8), 0)
			node := nodes[0]
			devs := mig.Devices(node, mig.NameOrder)
			for _, p := range m.Profiles() {
				got, ok := mig.FirstFitting(node, devs, p.Name)
				as, err := FirstFit.Place(node, mig.MustRequest(mig.RequestItem{Profile: p.Name, Count: 1}))
				if ok != (err == nil) {
					t.Fatalf("%s %s: allocator found %v, Place error %v (node %v)", m, p.Name, ok, err, node)
				}
				if ok && (got.GPU != as[0].GPU || got.Placement != as[0].Placement || got.Profile.Name != as[0].Profile.Name) {
					t.Fatalf("%s %s: allocator took GPU %d %v, FirstFit GPU %d %v", m, p.Name, got.GPU, got.Placement, as[0].GPU, as[0].Placement)
				}
			}
		}
	}
}
