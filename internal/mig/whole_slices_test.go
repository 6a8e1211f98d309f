package mig

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// oracleLegal checks a GPU's instances against the model's profile rows directly: legal starts
// and sizes, no overlap, count and media limits, compute within the GPU.
func oracleLegal(m Model, ins []Instance) bool {
	var used uint32
	counts := map[string]int{}
	media, compute := 0, 0
	for _, in := range ins {
		p, err := m.Profile(in.Profile)
		if err != nil {
			return false
		}
		legal := false
		for _, s := range p.Starts {
			legal = legal || s == in.Placement.Start
		}
		mask := uint32(1<<in.Placement.Size-1) << in.Placement.Start
		if !legal || in.Placement.Size != p.MemorySlices || used&mask != 0 {
			return false
		}
		used |= mask
		counts[p.Name]++
		if counts[p.Name] > p.MaxCount {
			return false
		}
		if p.MediaExtensions {
			media++
		}
		compute += p.ComputeSlices
	}
	return media <= 1 && compute <= m.ComputeSlices()
}

// oracleSliceChoices lists, per GPU, the legal starts of profile p: on a usable MIG GPU beside
// its instances, on a usable, free, switchable whole GPU on its empty state.
func oracleSliceChoices(node Node, p Profile) (mig, switched map[int][]int) {
	mig, switched = map[int][]int{}, map[int][]int{}
	for g, gpu := range node.GPUs {
		if !gpu.Usable || gpu.State.Model() != p.Model {
			continue
		}
		var base []Instance
		var into map[int][]int
		switch {
		case gpu.Mode == ModeMIG:
			base, into = gpu.State.Instances(), mig
		case gpu.Mode == ModeWhole && gpu.Switchable && !gpu.InUse:
			into = switched
		default:
			continue
		}
		for _, s := range p.Starts {
			if oracleLegal(p.Model, append(append([]Instance(nil), base...), Instance{p.Name, Placement{s, p.MemorySlices}})) {
				into[g] = append(into[g], s)
			}
		}
	}
	return mig, switched
}

func randomMixedNode(rng *rand.Rand, m Model) (Node, []Link) {
	node, links := randomWholeNode(rng, m)
	ps := m.Profiles()
	for g := range node.GPUs {
		if node.GPUs[g].Mode != ModeMIG {
			continue
		}
		st := EmptyGPU(m)
		for k := rng.IntN(4); k > 0; k-- {
			p := ps[rng.IntN(len(ps))]
			if c := st.Candidates(p); len(c) > 0 {
				st, _ = st.Take(p, c[rng.IntN(len(c))])
			}
		}
		node.GPUs[g].State = st
	}
	return node, links
}

// One slice goes to a MIG GPU when one has a legal placement, to a GPU in use before an empty
// one, and switches a whole GPU only when no MIG GPU can take it, then the one least connected
// to the other free whole GPUs; such a node scores 0.
func TestSliceSwitchesAWholeGPULast(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 4))
	seen := map[string]int{}
	for run := 0; run < 6000; run++ {
		m := []Model{A100_40GB, A30_24GB, H100_80GB}[run%3]
		node, links := randomMixedNode(rng, m)
		p := m.Profiles()[rng.IntN(len(m.Profiles()))]
		req := MustRequest(RequestItem{Profile: p.Name, Count: 1})
		migChoices, switchChoices := oracleSliceChoices(node, p)
		fits := len(migChoices)+len(switchChoices) > 0
		score, ok := Score(node, req)
		as, err := Place(node, req)
		if ok != fits || (err == nil) != fits || (Explain(node, req) == "") != fits {
			t.Fatalf("run %d: %s on %+v: oracle fits %t, Score %t, Place %v, Explain %q", run, p.Name, node, fits, ok, err, Explain(node, req))
		}
		if !fits {
			seen["no fit"]++
			continue
		}
		a := as[0]
		gpu := node.GPUs[a.GPU]
		anyUsed := false
		for g := range migChoices {
			anyUsed = anyUsed || !node.GPUs[g].State.IsEmpty()
		}
		switch {
		case len(migChoices) > 0:
			seen["mig"]++
			if !contains(migChoices[a.GPU], a.Placement.Start) {
				t.Fatalf("run %d: %s to GPU %d start %d, not a legal MIG choice %v", run, p.Name, a.GPU, a.Placement.Start, migChoices)
			}
			if anyUsed && gpu.State.IsEmpty() {
				t.Fatalf("run %d: %s to empty GPU %d while a GPU in use has room (%v)", run, p.Name, a.GPU, migChoices)
			}
		default:
			seen["switch"]++
			if !contains(switchChoices[a.GPU], a.Placement.Start) {
				t.Fatalf("run %d: %s to GPU %d start %d, not a legal switch choice %v", run, p.Name, a.GPU, a.Placement.Start, switchChoices)
			}
			linksOf := func(g int) int {
				n := 0
				for o, other := range node.GPUs {
					if o != g && other.Usable && !other.InUse && other.Mode == ModeWhole {
						n += oracleLink(links, len(node.GPUs), g, o)
					}
				}
				return n
			}
			for g := range switchChoices {
				if linksOf(g) < linksOf(a.GPU) {
					t.Fatalf("run %d: switched GPU %d (links %d), GPU %d has links %d", run, a.GPU, linksOf(a.GPU), g, linksOf(g))
				}
			}
			if score != 0 {
				t.Fatalf("run %d: a node that must switch scores %d", run, score)
			}
		}
		cp := Node{GPUs: append([]GPU(nil), node.GPUs...), Topology: node.Topology}
		if err := Apply(cp, as); err != nil {
			t.Fatalf("run %d: apply: %v", run, err)
		}
		if cp.GPUs[a.GPU].Mode != ModeMIG {
			t.Fatalf("run %d: GPU %d in mode %s after Apply", run, a.GPU, cp.GPUs[a.GPU].Mode)
		}
		checkNode(t, cp)
	}
	for _, k := range []string{"no fit", "mig", "switch"} {
		if seen[k] < 300 {
			t.Errorf("only %d random cases of %q: the test explores too little (%v)", seen[k], k, seen)
		}
	}
}

// A request of several slices switches a whole GPU only when the MIG GPUs cannot take it all,
// and every whole GPU it uses was free and switchable.
func TestSlicesSwitchOnlyWhenNeeded(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 5))
	switched := 0
	for run := 0; run < 3000; run++ {
		m := []Model{A100_40GB, A30_24GB, H100_80GB}[run%3]
		node, _ := randomMixedNode(rng, m)
		ps := m.Profiles()
		req := MustRequest(RequestItem{Profile: ps[rng.IntN(len(ps))].Name, Count: 1 + rng.IntN(2)},
			RequestItem{Profile: ps[rng.IntN(len(ps))].Name, Count: rng.IntN(3)})
		migOnly := Node{GPUs: append([]GPU(nil), node.GPUs...)}
		for g := range migOnly.GPUs {
			migOnly.GPUs[g].Switchable = false
		}
		_, fitsOnMIG := Score(migOnly, req)
		as, err := Place(node, req)
		if fitsOnMIG && err != nil {
			t.Fatalf("run %d: fits on the MIG GPUs but Place: %v", run, err)
		}
		if err != nil {
			continue
		}
		for _, a := range as {
			g := node.GPUs[a.GPU]
			if g.Mode == ModeMIG {
				continue
			}
			switched++
			if fitsOnMIG {
				t.Fatalf("run %d: %v fits on the MIG GPUs, yet GPU %d (%s) is switched", run, req.Slices(), a.GPU, g.Mode)
			}
			if g.Mode != ModeWhole || !g.Switchable || g.InUse || !g.Usable {
				t.Fatalf("run %d: slice on GPU %+v", run, g)
			}
		}
		cp := Node{GPUs: append([]GPU(nil), node.GPUs...)}
		if err := Apply(cp, as); err != nil {
			t.Fatalf("run %d: apply: %v", run, err)
		}
		checkNode(t, cp)
	}
	if switched < 200 {
		t.Errorf("only %d switched slices: the test explores too little", switched)
	}
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestSwitchedGPUTakesTheNextSlices(t *testing.T) {
	full, err := NewGPUState(H100_80GB, []Instance{{"7g.80gb", Placement{0, 8}}})
	if err != nil {
		t.Fatal(err)
	}
	whole := GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole, Switchable: true}
	for _, tc := range []struct {
		name string
		node Node
		req  []RequestItem
		gpus []int // each slice's GPU, largest first
	}{
		{"two slices share one switched GPU",
			Node{GPUs: []GPU{{State: full, Usable: true}, whole, whole}},
			[]RequestItem{{"1g.10gb", 2}}, []int{1, 1}},
		{"the MIG GPU first, a switch for what it cannot hold",
			Node{GPUs: []GPU{whole, {State: EmptyGPU(H100_80GB), Usable: true}}},
			[]RequestItem{{"4g.40gb", 1}, {"3g.40gb", 1}, {"1g.10gb", 1}}, []int{1, 1, 0}},
		{"the whole GPU outside the NVLink pair switches",
			Node{GPUs: []GPU{whole, whole, whole}, Topology: mustTopology(3, []Link{
				0, LinkNVLink, LinkSameNUMA,
				LinkNVLink, 0, LinkSameNUMA,
				LinkSameNUMA, LinkSameNUMA, 0})},
			[]RequestItem{{"1g.10gb", 1}}, []int{2}},
		{"a whole GPU in use does not switch",
			Node{GPUs: []GPU{{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole, Switchable: true, InUse: true}, whole}},
			[]RequestItem{{"3g.40gb", 1}}, []int{1}},
	} {
		as, err := Place(tc.node, MustRequest(tc.req...))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []int
		for _, a := range as {
			got = append(got, a.GPU)
		}
		if !slices.Equal(got, tc.gpus) {
			t.Errorf("%s: GPUs %v, want %v", tc.name, got, tc.gpus)
		}
	}
	// Nothing switchable: the whole GPU is never used and Explain says why.
	node := Node{GPUs: []GPU{{State: full, Usable: true}, {State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole}}}
	req := MustRequest(RequestItem{"1g.10gb", 1})
	if _, ok := Score(node, req); ok {
		t.Errorf("a slice fits a node whose only room is a whole GPU that may not switch")
	}
	if msg := Explain(node, req); !strings.Contains(msg, "gpu 1 (H100-80GB): MIG off, not switchable") {
		t.Errorf("Explain: %q", msg)
	}
}
