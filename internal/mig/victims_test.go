package mig

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// oracleVictims is ChooseVictims by brute force, on another code path: every subset of the
// evictable owners is evicted, the rest rebuilt with NewGPUState, every placement tried with
// Take, and the cheapest kept by oracleLess.
func oracleVictims(t testing.TB, m Model, hs []Holder, p Profile, preemptor int32) (VictimChoice, bool) {
	t.Helper()
	blocked := map[string]bool{}
	for _, h := range hs {
		if h.Owner == "" || h.Pinned || h.Priority >= preemptor {
			blocked[h.Owner] = true
		}
	}
	seen := map[string]bool{}
	var owners []string
	for _, h := range hs {
		if !h.Leaving && !blocked[h.Owner] && !seen[h.Owner] {
			seen[h.Owner] = true
			owners = append(owners, h.Owner)
		}
	}
	sort.Strings(owners)
	var best VictimChoice
	found := false
	for set := 0; set < 1<<len(owners); set++ {
		evict := map[string]bool{}
		var names []string
		for i, o := range owners {
			if set&(1<<i) != 0 {
				evict[o] = true
				names = append(names, o)
			}
		}
		prio := map[string]int32{}
		var keep []Instance
		destroyed := 0
		for _, h := range hs {
			switch {
			case h.Leaving:
			case evict[h.Owner]:
				destroyed++
				if q, ok := prio[h.Owner]; !ok || h.Priority > q {
					prio[h.Owner] = h.Priority
				}
			default:
				keep = append(keep, h.Instance)
			}
		}
		st, err := NewGPUState(m, keep)
		if err != nil {
			t.Fatalf("oracle: remaining holders %v: %v", keep, err)
		}
		var prios []int32
		for _, o := range names {
			prios = append(prios, prio[o])
		}
		sort.Slice(prios, func(i, j int) bool { return prios[i] > prios[j] })
		for _, pl := range p.Placements() {
			if _, err := st.Take(p, pl); err != nil {
				continue
			}
			leaving := 0
			for _, h := range hs {
				if h.Leaving && (Slot{Profile: h.Profile, Placement: h.Placement}).Overlaps(Slot{Profile: h.Profile, Placement: pl}) {
					leaving++
				}
			}
			c := VictimChoice{Profile: p, Placement: pl, Owners: names, Priorities: prios, Instances: destroyed, Leaving: leaving}
			if !found || oracleLess(c, best) {
				best, found = c, true
			}
		}
	}
	return best, found
}

// oracleLess is VictimChoice.Less written out as a key comparison.
func oracleLess(a, b VictimChoice) bool {
	key := func(c VictimChoice) []int64 {
		k := []int64{int64(len(c.Owners))}
		for _, p := range c.Priorities {
			k = append(k, int64(p))
		}
		return append(k, int64(c.Instances), int64(c.Leaving))
	}
	ka, kb := key(a), key(b)
	for i := range ka {
		if ka[i] != kb[i] {
			return ka[i] < kb[i]
		}
	}
	if x, y := strings.Join(a.Owners, "\x00"), strings.Join(b.Owners, "\x00"); x != y {
		return x < y
	}
	return a.Placement.Start < b.Placement.Start
}

var victimCmp = cmpopts.IgnoreUnexported(Profile{})

func checkVictims(t *testing.T, m Model, hs []Holder, p Profile, preemptor int32) {
	t.Helper()
	got, ok, err := ChooseVictims(m, hs, p, preemptor)
	if err != nil {
		t.Fatalf("%s %s holders %+v: %v", m, p.Name, hs, err)
	}
	want, wok := oracleVictims(t, m, hs, p, preemptor)
	if ok != wok {
		t.Fatalf("%s %s holders %+v preemptor %d: found %v, oracle %v (%v)", m, p.Name, hs, preemptor, ok, wok, want)
	}
	if !ok {
		return
	}
	if d := cmp.Diff(want, got, victimCmp, cmpopts.EquateEmpty()); d != "" {
		t.Fatalf("%s %s holders %+v preemptor %d (-oracle +got):\n%s", m, p.Name, hs, preemptor, d)
	}
	checkChoiceLegal(t, m, hs, got, preemptor)
}

// checkChoiceLegal: no victim of equal or higher priority, pinned or ownerless; with every
// instance of the victims gone, the placement is legal.
func checkChoiceLegal(t *testing.T, m Model, hs []Holder, c VictimChoice, preemptor int32) {
	t.Helper()
	victim := map[string]bool{}
	for _, o := range c.Owners {
		victim[o] = true
	}
	var keep []Instance
	for _, h := range hs {
		if victim[h.Owner] {
			if h.Owner == "" || h.Pinned || h.Priority >= preemptor {
				t.Fatalf("victim %q of %+v may not be evicted (preemptor %d)", h.Owner, h, preemptor)
			}
			continue
		}
		if !h.Leaving {
			keep = append(keep, h.Instance)
		}
	}
	st, err := NewGPUState(m, keep)
	if err == nil {
		_, err = st.Take(c.Profile, c.Placement)
	}
	if err != nil {
		t.Fatalf("choice %v on %+v is not legal: %v", c, hs, err)
	}
}

// randomHolders gives the instances of st owners, priorities and flags: k owners among n
// instances, priorities in [0, 3], a few pinned, leaving or ownerless.
func randomHolders(r *rand.Rand, st GPUState) []Holder {
	in := st.Instances()
	k := 1 + r.IntN(len(in)+1)
	prio := make([]int32, k)
	for i := range prio {
		prio[i] = int32(r.IntN(4))
	}
	hs := make([]Holder, len(in))
	for i, inst := range in {
		o := r.IntN(k)
		hs[i] = Holder{Instance: inst, Owner: fmt.Sprintf("pod-%d", o), Priority: prio[o]}
		switch r.IntN(20) {
		case 0:
			hs[i].Pinned = true
		case 1:
			hs[i].Leaving = true
		case 2:
			hs[i].Owner = ""
		}
	}
	return hs
}

// TestChooseVictimsOracleAllStates compares ChooseVictims with the brute-force oracle on
// every legal state of every model, for every profile, with owners, priorities and flags
// drawn from a seeded generator: the states and profiles are exhaustive, the owner
// assignments sampled (one per state and profile; with -short, every fourth state). Models of
// one geometry (geometryKey) differ only in names and memory sizes, which ChooseVictims does
// not read: the first model of each geometry stands for the others.
func TestChooseVictimsOracleAllStates(t *testing.T) {
	stride := 1
	if testing.Short() {
		stride = 4
	}
	for _, m := range onePerGeometry(Models()) {
		t.Run(m.String(), func(t *testing.T) {
			tab := tableFor(m)
			r := rand.New(rand.NewPCG(uint64(m), 26))
			for i := 0; i < len(tab.states); i += stride {
				st := GPUState{model: m, idx: uint16(i)}
				for _, p := range m.Profiles() {
					checkVictims(t, m, randomHolders(r, st), p, 3)
				}
			}
		})
	}
}

// TestChooseVictimsOracleExhaustiveA30 is exhaustive on the A30 (76 states): every state,
// every profile, every way to group the instances into owners and every priority in
// {0, 1, 2} per owner against a preemptor of priority 2 (so 2 is never evicted).
func TestChooseVictimsOracleExhaustiveA30(t *testing.T) {
	m := A30_24GB
	tab := tableFor(m)
	cases := 0
	for i := range tab.states {
		in := GPUState{model: m, idx: uint16(i)}.Instances()
		forEachPartition(len(in), func(owner []int, k int) {
			prio := make([]int32, k)
			var rec func(j int)
			rec = func(j int) {
				if j < k {
					for q := int32(0); q <= 2; q++ {
						prio[j] = q
						rec(j + 1)
					}
					return
				}
				hs := make([]Holder, len(in))
				for x, inst := range in {
					hs[x] = Holder{Instance: inst, Owner: fmt.Sprintf("pod-%d", owner[x]), Priority: prio[owner[x]]}
				}
				for _, p := range m.Profiles() {
					checkVictims(t, m, hs, p, 2)
					cases++
				}
			}
			rec(0)
		})
	}
	t.Logf("%d cases", cases)
}

// forEachPartition calls f with every grouping of n items into owners (restricted growth
// strings: owner[i] <= max(owner[:i])+1), and the number of owners.
func forEachPartition(n int, f func(owner []int, k int)) {
	owner := make([]int, n)
	var rec func(i, k int)
	rec = func(i, k int) {
		if i == n {
			f(owner, k)
			return
		}
		for o := 0; o <= k; o++ {
			owner[i] = o
			rec(i+1, max(k, o+1))
		}
	}
	rec(0, 0)
}

func TestChooseVictimsExamples(t *testing.T) {
	m := H100_80GB
	oneG := func(start int, owner string, prio int32) Holder {
		return Holder{Instance: Instance{Profile: "1g.10gb", Placement: Placement{Start: start, Size: 1}}, Owner: owner, Priority: prio}
	}
	seven := []Holder{oneG(0, "a", 0), oneG(1, "b", 0), oneG(2, "c", 0), oneG(3, "d", 0), oneG(4, "e", 0), oneG(5, "f", 0), oneG(6, "g", 0)}
	cases := []struct {
		name      string
		hs        []Holder
		profile   string
		preemptor int32
		want      string // VictimChoice.String, "" for none
	}{
		{"3g evicts three, not four", seven, "3g.40gb", 10, "3g.40gb@4 evicting [e f g] (priorities [0 0 0])"},
		{"7g evicts all seven", seven, "7g.80gb", 10, "7g.80gb@0 evicting [a b c d e f g] (priorities [0 0 0 0 0 0 0])"},
		{"1g evicts one", seven, "1g.10gb", 10, "1g.10gb@0 evicting [a] (priorities [0])"},
		{"equal priority is never a victim", seven, "1g.10gb", 0, ""},
		{"lowest priority first", []Holder{oneG(0, "a", 5), oneG(1, "b", 5), oneG(2, "c", 5), oneG(3, "d", 5),
			oneG(4, "e", 1), oneG(5, "f", 5), oneG(6, "g", 5)}, "1g.10gb", 10, "1g.10gb@4 evicting [e] (priorities [1])"},
		{"lower priority beats", []Holder{
			{Instance: Instance{Profile: "3g.40gb", Placement: Placement{Start: 0, Size: 4}}, Owner: "x", Priority: 4},
			{Instance: Instance{Profile: "3g.40gb", Placement: Placement{Start: 4, Size: 4}}, Owner: "y", Priority: 2}},
			"3g.40gb", 10, "3g.40gb@4 evicting [y] (priorities [2])"},
		{"one owner of four counts once", []Holder{oneG(0, "big", 0), oneG(1, "big", 0), oneG(2, "big", 0), oneG(3, "big", 0),
			oneG(4, "e", 0), oneG(5, "f", 0), oneG(6, "g", 0)}, "3g.40gb", 10, "3g.40gb@0 evicting [big] (priorities [0])"},
		{"the media engines' holder goes", []Holder{
			{Instance: Instance{Profile: "1g.10gb+me", Placement: Placement{Start: 0, Size: 1}}, Owner: "me", Priority: 0}},
			"1g.10gb+me", 10, "1g.10gb.me@0 evicting [me] (priorities [0])"},
		{"pinned and leaving", []Holder{oneG(0, "a", 0), oneG(1, "b", 0), oneG(2, "c", 0), {Instance: Instance{Profile: "1g.10gb",
			Placement: Placement{Start: 3, Size: 1}}, Owner: "d", Leaving: true}, {Instance: Instance{Profile: "3g.40gb",
			Placement: Placement{Start: 4, Size: 4}}, Owner: "e", Pinned: true}}, "3g.40gb", 10, "3g.40gb@0 evicting [a b c] (priorities [0 0 0])"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, ok, err := ChooseVictims(m, tc.hs, mustProfile(t, m, tc.profile), tc.preemptor)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if ok {
				got = c.String()
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			checkVictims(t, m, tc.hs, mustProfile(t, m, tc.profile), tc.preemptor)
		})
	}
}

func TestChooseVictimsErrors(t *testing.T) {
	m := H100_80GB
	p := mustProfile(t, m, "1g.10gb")
	overlap := []Holder{{Instance: Instance{Profile: "3g.40gb", Placement: Placement{Start: 0, Size: 4}}, Owner: "a"},
		{Instance: Instance{Profile: "1g.10gb", Placement: Placement{Start: 1, Size: 1}}, Owner: "b"}}
	if _, _, err := ChooseVictims(m, overlap, p, 1); err == nil {
		t.Fatal("overlapping holders: want an error")
	}
	if _, _, err := ChooseVictims(m, nil, mustProfile(t, A30_24GB, "1g.6gb"), 1); err == nil {
		t.Fatal("profile of another model: want an error")
	}
	if _, _, err := ChooseVictims(0, nil, p, 1); err == nil {
		t.Fatal("no model: want an error")
	}
}

func TestVictimChoiceLess(t *testing.T) {
	base := VictimChoice{Owners: []string{"a", "b"}, Priorities: []int32{3, 1}, Instances: 2, Placement: Placement{Start: 4}}
	better := []VictimChoice{
		{Owners: []string{"z"}, Priorities: []int32{9}, Instances: 5, Placement: Placement{Start: 6}},
		{Owners: []string{"x", "y"}, Priorities: []int32{2, 2}, Instances: 9},
		{Owners: []string{"x", "y"}, Priorities: []int32{3, 0}, Instances: 9},
		{Owners: []string{"x", "y"}, Priorities: []int32{3, 1}, Instances: 1, Leaving: 3},
		{Owners: []string{"x", "y"}, Priorities: []int32{3, 1}, Instances: 2, Leaving: -1},
		{Owners: []string{"a", "a"}, Priorities: []int32{3, 1}, Instances: 2, Placement: Placement{Start: 6}},
		{Owners: []string{"a", "b"}, Priorities: []int32{3, 1}, Instances: 2, Placement: Placement{Start: 0}},
	}
	for i, b := range better {
		if !b.Less(base) || base.Less(b) {
			t.Errorf("case %d: %+v should be cheaper than %+v", i, b, base)
		}
		if b.Less(base) != oracleLess(b, base) {
			t.Errorf("case %d: Less and oracleLess disagree", i)
		}
	}
	if base.Less(base) {
		t.Error("a choice is not cheaper than itself")
	}
}

// FuzzChooseVictims builds a state from the fuzzer's bytes (a model, instances taken where
// legal, owners, priorities and flags) and compares ChooseVictims with the oracle.
func FuzzChooseVictims(f *testing.F) {
	f.Add([]byte{4, 0, 0, 0, 1, 1, 0, 2, 2, 0}, uint8(2), int8(3))
	f.Add([]byte{1, 2, 0, 3, 2, 4, 5}, uint8(0), int8(1))
	f.Fuzz(func(t *testing.T, data []byte, profile uint8, preemptor int8) {
		if len(data) == 0 {
			return
		}
		models := Models()
		m := models[int(data[0])%len(models)]
		profs := m.Profiles()
		st := EmptyGPU(m)
		var hs []Holder
		for i := 1; i+2 < len(data); i += 3 {
			p := profs[int(data[i])%len(profs)]
			pl := p.Placements()[int(data[i+1])%len(p.Starts)]
			next, err := st.Take(p, pl)
			if err != nil {
				continue
			}
			st = next
			b := data[i+2]
			h := Holder{Instance: Instance{Profile: p.Name, Placement: pl}, Owner: fmt.Sprintf("pod-%d", b%4), Priority: int32(b>>2%4) - 1}
			h.Pinned, h.Leaving = b>>4&7 == 1, b>>4&7 == 2
			if b>>4&7 == 3 {
				h.Owner = ""
			}
			hs = append(hs, h)
		}
		checkVictims(t, m, hs, profs[int(profile)%len(profs)], int32(preemptor))
	})
}

func TestPlanPreemption(t *testing.T) {
	oneG := func(start int, owner string, prio int32) Holder {
		return Holder{Instance: Instance{Profile: "1g.10gb", Placement: Placement{Start: start, Size: 1}}, Owner: owner, Priority: prio}
	}
	full := func(prefix string, prio int32) []Holder {
		var hs []Holder
		for s := 0; s < 7; s++ {
			hs = append(hs, oneG(s, fmt.Sprintf("%s%d", prefix, s), prio))
		}
		return hs
	}
	cases := []struct {
		name   string
		gpus   []VictimGPU
		req    []RequestItem
		owners []string
		gpu    []int
		ok     bool
	}{
		{"7g on the GPU of lower priority", []VictimGPU{{H100_80GB, true, full("a", 5)}, {H100_80GB, true, full("b", 1)}},
			[]RequestItem{{Profile: "7g.80gb", Count: 1}}, []string{"b0", "b1", "b2", "b3", "b4", "b5", "b6"}, []int{1}, true},
		{"unusable GPU skipped", []VictimGPU{{H100_80GB, true, full("a", 5)}, {H100_80GB, false, full("b", 1)}},
			[]RequestItem{{Profile: "3g.40gb", Count: 1}}, []string{"a4", "a5", "a6"}, []int{0}, true},
		{"two 3g: every 1g of the GPU goes", []VictimGPU{{H100_80GB, true, full("a", 1)}},
			[]RequestItem{{Profile: "3g.40gb", Count: 2}}, []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6"}, []int{0, 0}, true},
		{"an owner on two GPUs frees both", []VictimGPU{
			{H100_80GB, true, []Holder{{Instance: Instance{Profile: "7g.80gb", Placement: Placement{Start: 0, Size: 8}}, Owner: "w", Priority: 1}}},
			{H100_80GB, true, []Holder{{Instance: Instance{Profile: "7g.80gb", Placement: Placement{Start: 0, Size: 8}}, Owner: "w", Priority: 1}}}},
			[]RequestItem{{Profile: "7g.80gb", Count: 2}}, []string{"w"}, []int{0, 1}, true},
		{"nothing of lower priority", []VictimGPU{{H100_80GB, true, full("a", 9)}},
			[]RequestItem{{Profile: "1g.10gb", Count: 1}}, nil, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, ok, err := PlanPreemption(tc.gpus, MustRequest(tc.req...), 9)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			var gpus []int
			for _, a := range plan.Assignments {
				gpus = append(gpus, a.GPU)
			}
			if d := cmp.Diff(tc.owners, plan.Owners); d != "" {
				t.Errorf("owners (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.gpu, gpus); d != "" {
				t.Errorf("GPUs (-want +got):\n%s", d)
			}
			checkPlanLegal(t, tc.gpus, plan, 9)
		})
	}
}

// checkPlanLegal: the node, with every instance of the plan's owners gone, takes every
// assignment; no owner of priority >= preemptor is evicted.
func checkPlanLegal(t *testing.T, gpus []VictimGPU, plan PreemptionPlan, preemptor int32) {
	t.Helper()
	evicted := map[string]bool{}
	for _, o := range plan.Owners {
		evicted[o] = true
	}
	node := Node{}
	for _, g := range gpus {
		var keep []Instance
		for _, h := range g.Holders {
			if evicted[h.Owner] {
				if h.Owner == "" || h.Pinned || h.Priority >= preemptor {
					t.Fatalf("evicted %+v", h)
				}
				continue
			}
			if !h.Leaving {
				keep = append(keep, h.Instance)
			}
		}
		st, err := NewGPUState(g.Model, keep)
		if err != nil {
			t.Fatal(err)
		}
		node.GPUs = append(node.GPUs, GPU{State: st, Usable: g.Usable})
	}
	if err := Apply(node, plan.Assignments); err != nil {
		t.Fatalf("plan %+v does not apply: %v", plan, err)
	}
}

// TestPlanPreemptionOneSliceIsExact: for one slice, the plan is the cheapest ChooseVictims
// choice over the node's GPUs, on random two-GPU nodes.
func TestPlanPreemptionOneSliceIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 26))
	m := H100_80GB
	tab := tableFor(m)
	for n := 0; n < 500; n++ {
		var gpus []VictimGPU
		for g := 0; g < 2; g++ {
			st := GPUState{model: m, idx: uint16(r.IntN(len(tab.states)))}
			gpus = append(gpus, VictimGPU{Model: m, Usable: true, Holders: randomHolders(r, st)})
			for i := range gpus[g].Holders {
				gpus[g].Holders[i].Owner += fmt.Sprintf("-gpu%d", g) // owners on one GPU each
			}
		}
		p := m.Profiles()[r.IntN(len(m.Profiles()))]
		plan, ok, err := PlanPreemption(gpus, MustRequest(RequestItem{Profile: p.Name, Count: 1}), 3)
		if err != nil {
			t.Fatal(err)
		}
		bestGPU := -1
		var best VictimChoice
		for g := range gpus {
			c, cok := oracleVictims(t, m, gpus[g].Holders, p, 3)
			if cok && (bestGPU < 0 || oracleLess(c, best)) {
				bestGPU, best = g, c
			}
		}
		if ok != (bestGPU >= 0) {
			t.Fatalf("ok = %v, oracle found GPU %d", ok, bestGPU)
		}
		if !ok {
			continue
		}
		if plan.Assignments[0].GPU != bestGPU || plan.Assignments[0].Placement != best.Placement || !cmp.Equal(plan.Owners, best.Owners, cmpopts.EquateEmpty()) {
			t.Fatalf("plan %+v, oracle GPU %d %v", plan, bestGPU, best)
		}
		checkPlanLegal(t, gpus, plan, 3)
	}
}

// geometryKey is what the placement tables are built from, without names and sizes: the
// model's slice counts and, per profile, its slices, count limit, starts and option.
func geometryKey(m Model) string {
	spec := modelTables[m]
	key := fmt.Sprintf("%d/%d", spec.computeSlices, spec.memorySlices)
	for _, p := range spec.profiles {
		key += fmt.Sprintf(";%d,%d,%d,%v,%v", p.compute, p.memory, p.maxCount, p.starts, p.option)
	}
	return key
}

// onePerGeometry keeps the first model of each geometry, in order.
func onePerGeometry(models []Model) []Model {
	seen := map[string]bool{}
	var out []Model
	for _, m := range models {
		if k := geometryKey(m); !seen[k] {
			seen[k] = true
			out = append(out, m)
		}
	}
	return out
}

func TestOnePerGeometryKeepsEveryGeometry(t *testing.T) {
	kept := onePerGeometry(Models())
	if len(kept) < 2 || len(kept) >= len(Models()) {
		t.Fatalf("%d of %d models kept: the key tells geometries apart badly", len(kept), len(Models()))
	}
	for _, m := range Models() {
		found := false
		for _, k := range kept {
			found = found || geometryKey(k) == geometryKey(m)
		}
		if !found {
			t.Errorf("%s: its geometry has no model left", m)
		}
	}
}
