package mig

import (
	"math/rand/v2"
	"testing"
)

// randomNode fills a node of the model's GPUs with random arrivals and departures placed by
// the Slicer policy, and marks a GPU unusable now and then.
func randomNode(rng *rand.Rand, m Model, gpus int) Node {
	node := Node{GPUs: make([]GPU, gpus)}
	for g := range node.GPUs {
		node.GPUs[g] = GPU{State: EmptyGPU(m), Usable: rng.IntN(10) != 0}
		profs := m.Profiles()
		for range rng.IntN(8) {
			p := profs[rng.IntN(len(profs))]
			if c := node.GPUs[g].State.Candidates(p); len(c) > 0 {
				node.GPUs[g].State, _ = node.GPUs[g].State.Take(p, c[rng.IntN(len(c))])
			}
		}
	}
	return node
}

// The stock allocator's first fitting device in PreferredOrder is Place's for a one-slice
// request: the published order carries the policy (migsim's test has NameOrder and FirstFit).
func TestDeviceOrderCarriesThePolicy(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, name := range []string{"H100-80GB", "A100-40GB", "H200-141GB"} {
		m, err := ParseModel(name)
		if err != nil {
			t.Fatal(err)
		}
		for range 400 {
			node := randomNode(rng, m, 1+rng.IntN(8))
			devs := Devices(node, PreferredOrder)
			for _, p := range m.Profiles() {
				got, ok := FirstFitting(node, devs, p.Name)
				as, err := Place(node, MustRequest(RequestItem{Profile: p.Name, Count: 1}))
				if ok != (err == nil) {
					t.Fatalf("%s %s: allocator found %v, Place error %v (node %v)", name, p.Name, ok, err, node)
				}
				if !ok {
					continue
				}
				want := DRADevice{GPU: as[0].GPU, Profile: as[0].Profile, Placement: as[0].Placement}
				if got.GPU != want.GPU || got.Placement != want.Placement || got.Profile.Name != want.Profile.Name {
					t.Fatalf("%s %s: allocator took GPU %d %v, Place GPU %d %v", name, p.Name,
						got.GPU, got.Placement, want.GPU, want.Placement)
				}
			}
		}
	}
}

// Every (usable GPU, profile, legal placement) is listed exactly once in both orders.
func TestDevicesListEveryPlacementOnce(t *testing.T) {
	m, _ := ParseModel("H100-80GB")
	node := randomNode(rand.New(rand.NewPCG(1, 2)), m, 8)
	node.GPUs[3].Usable = false
	want := 0
	for _, g := range node.GPUs {
		if g.Usable {
			for _, p := range m.Profiles() {
				want += len(p.Starts)
			}
		}
	}
	for _, order := range []DeviceOrder{NameOrder, PreferredOrder} {
		devs := Devices(node, order)
		type key struct {
			gpu, start int
			profile    string
		}
		seen := map[key]bool{}
		for _, d := range devs {
			if d.GPU == 3 {
				t.Fatalf("%s lists a device of the unusable GPU 3", order.Name())
			}
			k := key{d.GPU, d.Placement.Start, d.Profile.Name}
			if seen[k] {
				t.Fatalf("%s lists %v twice", order.Name(), k)
			}
			seen[k] = true
		}
		if len(devs) != want {
			t.Fatalf("%s lists %d devices, want %d", order.Name(), len(devs), want)
		}
	}
}

func TestCanTake(t *testing.T) {
	m, _ := ParseModel("H100-80GB")
	p7 := mustProfile(t, m, "7g.80gb")
	p1 := mustProfile(t, m, "1g.10gb")
	s := EmptyGPU(m)
	if !s.CanTake(p7, Placement{Start: 0, Size: 8}) || s.CanTake(p7, Placement{Start: 1, Size: 8}) || s.CanTake(p1, Placement{Start: 0, Size: 2}) {
		t.Fatal("CanTake on an empty GPU disagrees with the placement table")
	}
	s, _ = s.Take(p1, Placement{Start: 6, Size: 1})
	if s.CanTake(p7, Placement{Start: 0, Size: 8}) || !s.CanTake(p1, Placement{Start: 0, Size: 1}) || s.CanTake(p1, Placement{Start: 6, Size: 1}) {
		t.Fatal("CanTake after a 1g at 6 disagrees with Take")
	}
	if (GPUState{}).CanTake(p1, Placement{Start: 0, Size: 1}) {
		t.Fatal("the zero state can take nothing")
	}
}
