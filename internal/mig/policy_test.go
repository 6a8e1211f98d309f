package mig

import (
	"math/bits"
	"math/rand/v2"
	"testing"
)

// checkNode verifies the invariants of every GPU of a node independently of the tables: no
// overlapping placements, every start legal, count and media limits, compute within the GPU.
func checkNode(t testing.TB, node Node) {
	t.Helper()
	for g, gpu := range node.GPUs {
		m := gpu.State.Model()
		var used uint32
		counts := map[string]int{}
		media, compute := 0, 0
		for _, in := range gpu.State.Instances() {
			p, err := m.Profile(in.Profile)
			if err != nil {
				t.Fatalf("gpu %d: %v", g, err)
			}
			legal := false
			for _, s := range p.Starts {
				legal = legal || s == in.Placement.Start
			}
			if !legal || in.Placement.Size != p.MemorySlices {
				t.Fatalf("gpu %d: %s at illegal %v", g, p.Name, in.Placement)
			}
			mask := uint32(1<<in.Placement.Size-1) << in.Placement.Start
			if used&mask != 0 {
				t.Fatalf("gpu %d: %s at %v overlaps (%s)", g, p.Name, in.Placement, gpu.State)
			}
			used |= mask
			counts[p.Name]++
			if counts[p.Name] > p.MaxCount {
				t.Fatalf("gpu %d: %d × %s over the limit %d", g, counts[p.Name], p.Name, p.MaxCount)
			}
			if p.MediaExtensions {
				media++
			}
			compute += p.ComputeSlices
		}
		if media > 1 || compute > m.ComputeSlices() || bits.OnesCount32(used) != gpu.State.UsedMemorySlices() {
			t.Fatalf("gpu %d: media %d compute %d in %s", g, media, compute, gpu.State)
		}
		// The state is rebuilt identically from what it reports (what the scheduler does).
		again, err := NewGPUState(m, gpu.State.Instances())
		if err != nil || again != gpu.State {
			t.Fatalf("gpu %d: rebuild = %v, %v; want %v", g, again, err, gpu.State)
		}
	}
}

type placed struct {
	node int
	as   []Assignment
}

// arriveDepart drives random arrivals and departures from a byte stream through the policy
// (Score, Place, Explain), each arrival to the feasible node of the best score, the first of
// equals (migsim.SelectNode, as the simulator places).
func arriveDepart(t testing.TB, m Model, ops []byte) {
	profiles := m.Profiles()
	nodes := make([]Node, 2)
	for i := range nodes {
		nodes[i].GPUs = make([]GPU, 3)
		for g := range nodes[i].GPUs {
			nodes[i].GPUs[g] = GPU{State: EmptyGPU(m), Usable: i != 1 || g != 2}
		}
	}
	var live []placed
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i], int(ops[i+1])
		if op%4 == 0 && len(live) > 0 {
			k := arg % len(live)
			for _, a := range live[k].as {
				s, err := nodes[live[k].node].GPUs[a.GPU].State.Release(a.Profile, a.Placement)
				if err != nil {
					t.Fatalf("release: %v", err)
				}
				nodes[live[k].node].GPUs[a.GPU].State = s
			}
			live = append(live[:k], live[k+1:]...)
			continue
		}
		items := []RequestItem{{Profile: profiles[arg%len(profiles)].Name, Count: 1}}
		if op%7 == 1 {
			items = append(items, RequestItem{Profile: profiles[(arg/7)%len(profiles)].Name, Count: 1 + int(op)%3})
		}
		req, err := NewRequest(items...)
		if err != nil {
			t.Fatal(err)
		}
		best, bestScore := -1, int64(-1)
		for n := range nodes {
			score, ok := Score(nodes[n], req)
			as, err := Place(nodes[n], req)
			if ok != (err == nil) {
				t.Fatalf("node %d: Score feasible=%v but Place err=%v", n, ok, err)
			}
			if ok && len(as) != req.Len() {
				t.Fatalf("node %d: feasible but %d assignments", n, len(as))
			}
			if ok != (Explain(nodes[n], req) == "") {
				t.Fatalf("node %d: feasible=%v but Explain says %q", n, ok, Explain(nodes[n], req))
			}
			for _, a := range as {
				if !nodes[n].GPUs[a.GPU].Usable {
					t.Fatalf("placed on an unusable GPU")
				}
			}
			if ok && score > bestScore {
				best, bestScore = n, score
			}
		}
		n := best
		if n < 0 {
			continue
		}
		as, _ := Place(nodes[n], req)
		if err := Apply(nodes[n], as); err != nil {
			t.Fatalf("apply: %v", err)
		}
		live = append(live, placed{n, as})
		checkNode(t, nodes[n])
	}
}

func TestArriveDepartProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, m := range []Model{A30_24GB, A100_40GB, H100_80GB} {
		for run := 0; run < 30; run++ {
			ops := make([]byte, 400)
			for i := range ops {
				ops[i] = byte(rng.IntN(256))
			}
			arriveDepart(t, m, ops)
		}
	}
}

func FuzzArriveDepartSlicer(f *testing.F) {
	f.Add(uint8(3), []byte{1, 6, 1, 0, 1, 0, 0, 0, 1, 4, 1, 5})
	f.Add(uint8(0), []byte{8, 2, 8, 2, 8, 2, 0, 1, 1, 3, 1, 4, 15, 9, 0, 0})
	f.Add(uint8(7), []byte{1, 1, 1, 1, 1, 1, 1, 1, 4, 0, 1, 2})
	f.Fuzz(func(t *testing.T, model uint8, ops []byte) {
		arriveDepart(t, Model(1+int(model)%numModels), ops)
	})
}

func TestScoreRange(t *testing.T) {
	req := MustRequest(RequestItem{Profile: "1g.10gb", Count: 2}, RequestItem{Profile: "3g.40gb", Count: 1})
	empty := Node{GPUs: []GPU{{State: EmptyGPU(H100_80GB), Usable: true}}}
	half, _ := NewGPUState(H100_80GB, []Instance{{"3g.40gb", Placement{0, 4}}})
	used := Node{GPUs: []GPU{{State: half, Usable: true}, {State: EmptyGPU(H100_80GB), Usable: true}}}
	for _, n := range []Node{empty, used} {
		s, ok := Score(n, req)
		if !ok || s < 0 || s > MaxNodeScore {
			t.Errorf("score %d, %v", s, ok)
		}
	}
	// Best fit: the node with a GPU in use scores higher for a small request.
	small := MustRequest(RequestItem{Profile: "1g.10gb", Count: 1})
	se, _ := Score(empty, small)
	su, _ := Score(used, small)
	if su <= se {
		t.Errorf("score of a node in use %d <= empty node %d", su, se)
	}
}

func benchNode(tb testing.TB) Node {
	states := [][]Instance{
		nil,
		{{"3g.40gb", Placement{0, 4}}},
		{{"4g.40gb", Placement{0, 4}}, {"1g.10gb", Placement{6, 1}}},
		{{"2g.20gb", Placement{0, 2}}, {"1g.10gb", Placement{2, 1}}, {"1g.20gb", Placement{6, 2}}},
		{{"7g.80gb", Placement{0, 8}}},
		{{"1g.10gb", Placement{4, 1}}, {"1g.10gb", Placement{5, 1}}, {"1g.10gb+me", Placement{6, 1}}},
		{{"3g.40gb", Placement{0, 4}}, {"3g.40gb", Placement{4, 4}}},
		nil,
	}
	n := Node{GPUs: make([]GPU, len(states))}
	for i, in := range states {
		s, err := NewGPUState(H100_80GB, in)
		if err != nil {
			tb.Fatal(err)
		}
		n.GPUs[i] = GPU{State: s, Usable: i != 7}
	}
	return n
}

func TestScoreNodeZeroAllocs(t *testing.T) {
	node := benchNode(t)
	req := MustRequest(RequestItem{Profile: "2g.20gb", Count: 1})
	if a := testing.AllocsPerRun(100, func() { Score(node, req) }); a != 0 {
		t.Errorf("Score allocates %v times", a)
	}
	p2, _ := H100_80GB.Profile("3g.40gb")
	if a := testing.AllocsPerRun(100, func() { node.GPUs[1].State.Fits(p2) }); a != 0 {
		t.Errorf("Fits allocates %v times", a)
	}
}

func BenchmarkScoreNode(b *testing.B) {
	node := benchNode(b)
	reqs := []*Request{
		MustRequest(RequestItem{Profile: "1g.10gb", Count: 1}),
		MustRequest(RequestItem{Profile: "3g.40gb", Count: 1}),
		MustRequest(RequestItem{Profile: "2g.20gb", Count: 1}),
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		Score(node, reqs[i%len(reqs)])
		i++
	}
}

func BenchmarkFits(b *testing.B) {
	node := benchNode(b)
	p, _ := H100_80GB.Profile("3g.40gb")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		node.GPUs[i&7].State.Fits(p)
		i++
	}
}
