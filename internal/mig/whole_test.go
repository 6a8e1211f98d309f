package mig

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// oracleWholeKey is the preference order of docs/design/whole-gpus.md written out directly:
// every GPU of set must be free whole or an empty, switchable MIG GPU, and sets compare by
// (fewest switches, highest weakest link, highest pair sum, highest sum of links left among the
// free GPUs). It reads Node.Links itself.
type oracleWholeKey [4]int

// oracleLink reads the n×n matrix the test built the node's topology from (nil: none).
func oracleLink(links []Link, n, a, b int) int {
	if len(links) != n*n {
		return 0
	}
	return min(int(links[a*n+b]), int(links[b*n+a]), 3)
}

// oracleServes is whether the GPU can take a whole-GPU request and whether it must switch.
func oracleServes(g GPU) (ok, switches bool) {
	if !g.Usable || g.InUse {
		return false, false
	}
	if g.Mode == ModeWhole {
		return true, false
	}
	if g.Mode == ModeMIG && g.Switchable && g.State.Model() != 0 && len(g.State.Instances()) == 0 {
		return true, true
	}
	return false, false
}

// oracleKey is the key of a legal set; free lists every GPU that can serve.
func oracleKey(node Node, links []Link, set, free []int) oracleWholeKey {
	pairs := func(gs []int) (weakest, sum int) {
		weakest = 3
		for i := range gs {
			for j := i + 1; j < len(gs); j++ {
				l := oracleLink(links, len(node.GPUs), gs[i], gs[j])
				weakest, sum = min(weakest, l), sum+l
			}
		}
		return weakest, sum
	}
	switches := 0
	for _, g := range set {
		if _, sw := oracleServes(node.GPUs[g]); sw {
			switches++
		}
	}
	var left []int
	for _, g := range free {
		if !slices.Contains(set, g) {
			left = append(left, g)
		}
	}
	w, s := pairs(set)
	_, l := pairs(left)
	return oracleWholeKey{-switches, w, s, l}
}

func oracleFree(node Node) []int {
	var free []int
	for g := range node.GPUs {
		if ok, _ := oracleServes(node.GPUs[g]); ok {
			free = append(free, g)
		}
	}
	return free
}

// oracleWhole enumerates every set of n GPUs and returns the best key, and whether any set is
// legal.
func oracleWhole(node Node, links []Link, n int) (key oracleWholeKey, found bool) {
	free := oracleFree(node)
	for mask := 0; mask < 1<<len(node.GPUs); mask++ {
		var set []int
		legal := true
		for g := range node.GPUs {
			if mask&(1<<g) != 0 {
				ok, _ := oracleServes(node.GPUs[g])
				legal = legal && ok
				set = append(set, g)
			}
		}
		if !legal || len(set) != n {
			continue
		}
		if k := oracleKey(node, links, set, free); !found || slices.Compare(k[:], key[:]) > 0 {
			key, found = k, true
		}
	}
	return key, found
}

// randomWholeNode is a node of 1 to 8 GPUs of mixed modes, holders and switchability, with no
// topology, a symmetric one or an asymmetric one.
func randomWholeNode(rng *rand.Rand, m Model) (Node, []Link) {
	n := 1 + rng.IntN(8)
	node := Node{GPUs: make([]GPU, n)}
	small := m.Profiles()[len(m.Profiles())-1]
	for g := range node.GPUs {
		st := EmptyGPU(m)
		if rng.IntN(4) == 0 {
			st, _ = st.Take(small, small.Placements()[0])
		}
		node.GPUs[g] = GPU{State: st, Usable: rng.IntN(8) != 0, Mode: GPUMode(rng.IntN(3)),
			Switchable: rng.IntN(3) != 0, InUse: rng.IntN(5) == 0}
		if node.GPUs[g].Mode != ModeMIG {
			node.GPUs[g].State = EmptyGPU(m)
		}
	}
	var links []Link
	if rng.IntN(4) != 0 {
		links = make([]Link, n*n)
		levels := 1 + rng.IntN(5) // few ranks make ties, many make differences
		for a := 0; a < n; a++ {
			for b := a + 1; b < n; b++ {
				l := Link(rng.IntN(levels))
				links[a*n+b], links[b*n+a] = l, l
				if rng.IntN(4) == 0 {
					links[b*n+a] = Link(rng.IntN(5))
				}
			}
		}
		node.Topology = mustTopology(n, links)
	}
	if rng.IntN(10) == 0 {
		// A topology of another node's GPUs is ignored.
		node.Topology, links = mustTopology(n+1, make([]Link, (n+1)*(n+1))), nil
	}
	return node, links
}

func mustTopology(n int, links []Link) *Topology {
	t, err := NewTopology(n, links)
	if err != nil {
		panic(err)
	}
	return t
}

func TestWholeMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 3))
	models := []Model{A100_40GB, A30_24GB, H100_80GB}
	fits := 0
	for run := 0; run < 4000; run++ {
		node, links := randomWholeNode(rng, models[run%len(models)])
		n := 1 + rng.IntN(len(node.GPUs)+1)
		wantKey, ok := oracleWhole(node, links, n)
		score, feasible := ScoreWhole(node, n)
		c, err := PlaceWhole(node, n)
		if feasible != ok || (err == nil) != ok || (ExplainWhole(node, n) == "") != ok {
			t.Fatalf("run %d, %d GPUs on %+v: oracle fits=%t, Score %t, Place err %v, Explain %q",
				run, n, node, ok, feasible, err, ExplainWhole(node, n))
		}
		if !ok {
			continue
		}
		fits++
		// The documented score: 80 for the share of GPUs left free, 12 for the share of
		// switches, 8 for the weakest link below NVLink (n > 1).
		ceil := func(a, b int) int { return (a + b - 1) / b }
		want := 100 - ceil(12*-wantKey[0], n) - ceil(80*(len(oracleFree(node))-n), len(node.GPUs))
		if n > 1 {
			want -= ceil(8*(3-wantKey[1]), 3)
		}
		if score != int64(max(want, 0)) {
			t.Fatalf("run %d: %d GPUs on %+v: score %d, want %d", run, n, node, score, max(want, 0))
		}
		if len(c.GPUs) != n || !slices.IsSorted(c.GPUs) {
			t.Fatalf("run %d: chose %v for %d GPUs", run, c.GPUs, n)
		}
		// The choice is legal, its switches are those the oracle counts, and its key is the
		// oracle's best (any set of the best key is correct; the smallest mask is chosen).
		var switches []int
		for _, g := range c.GPUs {
			ok, sw := oracleServes(node.GPUs[g])
			if !ok {
				t.Fatalf("run %d: chose GPU %d that cannot serve (%+v)", run, g, node.GPUs[g])
			}
			if sw {
				switches = append(switches, g)
			}
		}
		if !slices.Equal(switches, c.Switch) {
			t.Fatalf("run %d: switch %v, want %v", run, c.Switch, switches)
		}
		if got := oracleKey(node, links, c.GPUs, oracleFree(node)); got != wantKey {
			t.Fatalf("run %d: %d GPUs on %+v: chose %v of key %v, the best key is %v", run, n, node, c.GPUs, got, wantKey)
		}
	}
	if fits < 1000 {
		t.Errorf("only %d of 4000 random cases fit: the test explores too little", fits)
	}
}

// nvlPairs is an 8-GPU node wired as four NVLink-bridged pairs (H100 NVL), GPUs 0-3 on one
// NUMA node and 4-7 on the other.
func nvlPairs(gpus []GPU) Node {
	n := len(gpus)
	links := make([]Link, n*n)
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			switch {
			case a == b:
			case a/2 == b/2:
				links[a*n+b] = LinkNVLink
			case a/4 == b/4:
				links[a*n+b] = LinkSameNUMA
			}
		}
	}
	return Node{GPUs: gpus, Topology: mustTopology(n, links)}
}

func TestWholeNVLinkPairs(t *testing.T) {
	free := GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole}
	busy := free
	busy.InUse = true
	migEmpty := GPU{State: EmptyGPU(H100_80GB), Usable: true, Switchable: true}
	for _, tc := range []struct {
		name     string
		gpus     []GPU
		n        int
		want     []int
		toSwitch []int
	}{
		// The pair whose partner is busy goes first for one GPU: the two whole pairs stay.
		{"one GPU: break no free pair", []GPU{free, free, busy, free, free, free, migEmpty, migEmpty}, 1, []int{3}, nil},
		{"two GPUs: a free NVLink pair", []GPU{free, busy, free, free, free, busy, free, free}, 2, []int{2, 3}, nil},
		{"two GPUs: whole before switching, even unpaired", []GPU{free, busy, busy, free, migEmpty, migEmpty, busy, busy}, 2, []int{0, 3}, nil},
		{"four GPUs: two pairs on one NUMA node", []GPU{free, free, free, free, free, free, free, free}, 4, []int{0, 1, 2, 3}, nil},
		{"four GPUs: every whole one and a switch", []GPU{busy, free, free, busy, busy, free, migEmpty, migEmpty}, 4, []int{1, 2, 5, 6}, []int{6}},
	} {
		c, err := PlaceWhole(nvlPairs(tc.gpus), tc.n)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !slices.Equal(c.GPUs, tc.want) || !slices.Equal(c.Switch, tc.toSwitch) {
			t.Errorf("%s: %+v, want GPUs %v switch %v", tc.name, c, tc.want, tc.toSwitch)
		}
	}
}

func TestExplainWhole(t *testing.T) {
	used, _ := NewGPUState(H100_80GB, []Instance{{"1g.10gb", Placement{6, 1}}})
	node := Node{GPUs: []GPU{
		{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole},
		{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole, InUse: true},
		{State: used, Usable: true, Switchable: true},
		{State: EmptyGPU(H100_80GB), Usable: true},
		{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeSwitching},
		{State: EmptyGPU(H100_80GB)},
	}}
	want := "2 whole GPUs do not fit: 1 of 6 GPUs are free in whole mode, 0 more could switch from MIG: gpu 0: free;" +
		" gpu 1: in use; gpu 2: MIG slices in use (1 of 8 memory slices); gpu 3: MIG mode, not switchable;" +
		" gpu 4: MIG mode change pending; gpu 5: not usable (unhealthy or not managed by Slicer)"
	if got := ExplainWhole(node, 2); got != want {
		t.Errorf("ExplainWhole:\n got %q\nwant %q", got, want)
	}
	if got := ExplainWhole(node, 1); got != "" {
		t.Errorf("ExplainWhole of a fitting request: %q", got)
	}
	if _, ok := ScoreWhole(node, 0); ok {
		t.Errorf("zero whole GPUs fit")
	}
}

func TestScoreWholeOrdersNodes(t *testing.T) {
	free := GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole}
	busy := free
	busy.InUse = true
	migEmpty := GPU{State: EmptyGPU(H100_80GB), Usable: true, Switchable: true}
	score := func(n int, gpus ...GPU) int64 {
		s, ok := ScoreWhole(nvlPairs(gpus), n)
		if !ok {
			t.Fatalf("%d whole GPUs do not fit %+v", n, gpus)
		}
		return s
	}
	// Best fit: the node with fewer free GPUs left; no switch before a switch; NVLink first.
	if a, b := score(1, free, busy), score(1, free, free); a <= b {
		t.Errorf("a busier node scores %d <= %d", a, b)
	}
	if a, b := score(1, free, busy), score(1, migEmpty, busy); a <= b {
		t.Errorf("a node without a switch scores %d <= %d", a, b)
	}
	if a, b := score(2, free, free, busy, busy), score(2, free, busy, free, busy); a <= b {
		t.Errorf("an NVLink pair scores %d <= %d", a, b)
	}
	if s := score(2, migEmpty, migEmpty); s != MaxNodeScore-12 {
		t.Errorf("two switches on an NVLink pair, nothing left: %d, want %d", s, MaxNodeScore-12)
	}
}

func TestApplyWhole(t *testing.T) {
	node := nvlPairs([]GPU{
		{State: EmptyGPU(H100_80GB), Usable: true, Switchable: true},
		{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole},
	})
	c, err := PlaceWhole(node, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := ApplyWhole(node, c); err != nil {
		t.Fatal(err)
	}
	for g, gpu := range node.GPUs {
		if gpu.Mode != ModeWhole || !gpu.InUse {
			t.Errorf("gpu %d after ApplyWhole: %+v", g, gpu)
		}
	}
	if err := ApplyWhole(node, c); err == nil {
		t.Errorf("a GPU taken twice")
	}
	if _, ok := ScoreWhole(node, 1); ok {
		t.Errorf("a whole GPU fits a node whose GPUs are all in use")
	}
}

func wholeBenchNodes() map[string]Node {
	free := GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole}
	busy := free
	busy.InUse = true
	migEmpty := GPU{State: EmptyGPU(H100_80GB), Usable: true, Switchable: true}
	return map[string]Node{
		"8free": nvlPairs([]GPU{free, free, free, free, free, free, free, free}),
		"mixed": nvlPairs([]GPU{free, busy, free, free, migEmpty, migEmpty, busy, free}),
		"mig":   nvlPairs(benchNode(nil).GPUs),
		"migsw": nvlPairs([]GPU{migEmpty, migEmpty, migEmpty, migEmpty, migEmpty, migEmpty, migEmpty, migEmpty}),
	}
}

func TestWholeZeroAllocs(t *testing.T) {
	for name, node := range wholeBenchNodes() {
		for n := 1; n <= 8; n++ {
			if a := testing.AllocsPerRun(50, func() { ScoreWhole(node, n) }); a != 0 {
				t.Errorf("%s: ScoreWhole(%d) allocates %v times", name, n, a)
			}
		}
	}
	whole := GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole, Switchable: true}
	full, _ := NewGPUState(H100_80GB, []Instance{{"7g.80gb", Placement{0, 8}}})
	node := nvlPairs([]GPU{{State: full, Usable: true}, whole, whole, whole, whole, whole, whole, whole})
	req := MustRequest(RequestItem{Profile: "1g.10gb", Count: 2})
	if a := testing.AllocsPerRun(50, func() { Score(node, req) }); a != 0 {
		t.Errorf("Score with a switch allocates %v times", a)
	}
}

// BenchmarkWholeFilterScore is the scheduler's Filter and Score for n whole GPUs: two
// ScoreWhole calls per node of 8 GPUs.
func BenchmarkWholeFilterScore(b *testing.B) {
	nodes := wholeBenchNodes()
	for _, bc := range []struct {
		node string
		n    int
	}{{"8free", 1}, {"8free", 2}, {"8free", 4}, {"8free", 8}, {"mixed", 2}, {"mixed", 4}, {"migsw", 4}, {"mig", 1}} {
		node := nodes[bc.node]
		b.Run(bc.node+"/n="+string(rune('0'+bc.n)), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			c0 := threadCPU()
			for b.Loop() {
				ScoreWhole(node, bc.n)
				ScoreWhole(node, bc.n)
			}
			b.ReportMetric(float64(threadCPU()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkWholeSliceSwitch is Filter and Score (two Score calls) of a slice that only a
// switched whole GPU takes: the fallback's cost on a node of 8 GPUs.
func BenchmarkWholeSliceSwitch(b *testing.B) {
	whole := GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole, Switchable: true}
	full, _ := NewGPUState(H100_80GB, []Instance{{"7g.80gb", Placement{0, 8}}})
	node := nvlPairs([]GPU{{State: full, Usable: true}, {State: full, Usable: true}, whole, whole, whole, whole, whole, whole})
	req := MustRequest(RequestItem{Profile: "3g.40gb", Count: 1})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	c0 := threadCPU()
	for b.Loop() {
		Score(node, req)
		Score(node, req)
	}
	b.ReportMetric(float64(threadCPU()-c0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkWholeScoreNodeCPU is BenchmarkScoreNode's request mix on its all-MIG node, two
// Score calls (Filter and Score) per op, in thread CPU time: the slice path's cost beside the
// rows above on a shared machine.
func BenchmarkWholeScoreNodeCPU(b *testing.B) {
	node := benchNode(b)
	reqs := []*Request{
		MustRequest(RequestItem{Profile: "1g.10gb", Count: 1}),
		MustRequest(RequestItem{Profile: "3g.40gb", Count: 1}),
		MustRequest(RequestItem{Profile: "2g.20gb", Count: 1}),
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	c0 := threadCPU()
	i := 0
	for b.Loop() {
		Score(node, reqs[i%len(reqs)])
		Score(node, reqs[i%len(reqs)])
		i++
	}
	b.ReportMetric(float64(threadCPU()-c0)/float64(b.N), "cpu-ns/op")
}

// A 32-GPU node of uneven links: the search stops at its work bound with a legal set of n.
func TestWholeSearchIsBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 6))
	n := maxTopologyGPUs
	links := make([]Link, n*n)
	for a := 0; a < n; a++ {
		for b := a + 1; b < n; b++ {
			l := Link(rng.IntN(4))
			links[a*n+b], links[b*n+a] = l, l
		}
	}
	gpus := make([]GPU, n)
	for g := range gpus {
		gpus[g] = GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole}
	}
	node := Node{GPUs: gpus, Topology: mustTopology(n, links)}
	c0 := threadCPU()
	c, err := PlaceWhole(node, MaxWholeGPUs)
	if err != nil || len(c.GPUs) != MaxWholeGPUs {
		t.Fatalf("PlaceWhole: %+v, %v", c, err)
	}
	if d := threadCPU() - c0; d > 50*time.Millisecond {
		t.Errorf("the search took %v of CPU", d)
	}
}

// A node known only by counts scores as ScoreWhole scores a node of as many free whole GPUs with
// unknown links (no topology): the two kinds of node compare on one scale.
func TestScoreWholeCountMatchesScoreWhole(t *testing.T) {
	free := GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole}
	busy := free
	busy.InUse = true
	for gpus := 1; gpus <= 8; gpus++ {
		for nfree := 0; nfree <= gpus; nfree++ {
			node := Node{}
			for g := range gpus {
				if g < nfree {
					node.GPUs = append(node.GPUs, free)
				} else {
					node.GPUs = append(node.GPUs, busy)
				}
			}
			for n := 1; n <= gpus+1; n++ {
				want, wantOK := ScoreWhole(node, n)
				got, ok := ScoreWholeCount(gpus, nfree, n)
				if got != want || ok != wantOK {
					t.Errorf("%d GPUs, %d free, %d asked: ScoreWholeCount = %d, %v; ScoreWhole = %d, %v", gpus, nfree, n, got, ok, want, wantOK)
				}
			}
		}
	}
	if _, ok := ScoreWholeCount(2, 3, 1); ok {
		t.Error("more GPUs free than the node has fits")
	}
}
