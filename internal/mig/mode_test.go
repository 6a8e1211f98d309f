package mig

import "testing"

func TestSliceAndWholeUse(t *testing.T) {
	used, err := NewGPUState(H100_80GB, []Instance{{"1g.10gb", Placement{6, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	empty := EmptyGPU(H100_80GB)
	for _, tc := range []struct {
		name         string
		gpu          GPU
		slice, whole Use
	}{
		{"zero value: nothing", GPU{}, UseNo, UseNo},
		{"today's MIG GPU, empty", GPU{State: empty, Usable: true}, UseReady, UseNo},
		{"today's MIG GPU, in use", GPU{State: used, Usable: true}, UseReady, UseNo},
		{"today's unusable GPU", GPU{State: empty}, UseNo, UseNo},
		{"MIG, empty, switchable", GPU{State: empty, Usable: true, Switchable: true}, UseReady, UseAfterSwitch},
		{"MIG, slices, switchable", GPU{State: used, Usable: true, Switchable: true}, UseReady, UseNo},
		{"MIG, empty, switchable, client holds it", GPU{State: empty, Usable: true, Switchable: true, InUse: true}, UseReady, UseNo},
		{"MIG, empty, switchable, unusable", GPU{State: empty, Switchable: true}, UseNo, UseNo},
		{"MIG, switchable, no model", GPU{Usable: true, Switchable: true}, UseNo, UseNo},
		{"whole, free", GPU{State: empty, Usable: true, Mode: ModeWhole}, UseNo, UseReady},
		{"whole, free, switchable", GPU{State: empty, Usable: true, Mode: ModeWhole, Switchable: true}, UseAfterSwitch, UseReady},
		{"whole, in use, switchable", GPU{State: empty, Usable: true, Mode: ModeWhole, Switchable: true, InUse: true}, UseNo, UseNo},
		{"whole, unusable, switchable", GPU{State: empty, Mode: ModeWhole, Switchable: true}, UseNo, UseNo},
		{"whole, no MIG model", GPU{Usable: true, Mode: ModeWhole, Switchable: true}, UseNo, UseReady},
		{"switching, switchable", GPU{State: empty, Usable: true, Mode: ModeSwitching, Switchable: true}, UseNo, UseNo},
		{"unknown mode", GPU{State: empty, Usable: true, Mode: 9, Switchable: true}, UseNo, UseNo},
	} {
		if got := tc.gpu.SliceUse(); got != tc.slice {
			t.Errorf("%s: SliceUse = %s, want %s", tc.name, got, tc.slice)
		}
		if got := tc.gpu.WholeUse(); got != tc.whole {
			t.Errorf("%s: WholeUse = %s, want %s", tc.name, got, tc.whole)
		}
		if got, want := tc.gpu.slicesNow(), tc.slice == UseReady; got != want && tc.gpu.State.Valid() {
			t.Errorf("%s: slicesNow = %t, want %t", tc.name, got, want)
		}
	}
}

func TestTopology(t *testing.T) {
	two := []GPU{{}, {}}
	for _, tc := range []struct {
		name  string
		links []Link
		a, b  int
		want  Link
	}{
		{"symmetric", []Link{0, LinkNVLink, LinkNVLink, 0}, 0, 1, LinkNVLink},
		{"the lower direction", []Link{0, LinkNVLink, LinkSameNUMA, 0}, 1, 0, LinkSameNUMA},
		{"the lower direction, other way", []Link{0, LinkSamePCIeSwitch, LinkNVLink, 0}, 0, 1, LinkSamePCIeSwitch},
		{"above NVLink clamps", []Link{0, 200, 200, 0}, 0, 1, LinkNVLink},
		{"a GPU to itself", []Link{3, 3, 3, 3}, 1, 1, LinkOther},
		{"out of range", []Link{0, 3, 3, 0}, 0, 2, LinkOther},
	} {
		topo, err := NewTopology(2, tc.links)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := topo.Link(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: Link(%d, %d) = %d, want %d", tc.name, tc.a, tc.b, got, tc.want)
		}
		if got := (Node{GPUs: two, Topology: topo}).link(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: node.link(%d, %d) = %d, want %d", tc.name, tc.a, tc.b, got, tc.want)
		}
		// A topology of another number of GPUs, or none, ranks every pair LinkOther.
		if got := (Node{GPUs: []GPU{{}, {}, {}}, Topology: topo}).link(tc.a, tc.b); got != LinkOther {
			t.Errorf("%s: a 2-GPU topology on 3 GPUs links %d", tc.name, got)
		}
	}
	if got := (Node{GPUs: two}).link(0, 1); got != LinkOther {
		t.Errorf("no topology: %d", got)
	}
	for _, tc := range []struct {
		n     int
		links int
	}{{2, 3}, {-1, 1}, {maxTopologyGPUs + 1, (maxTopologyGPUs + 1) * (maxTopologyGPUs + 1)}} {
		if _, err := NewTopology(tc.n, make([]Link, tc.links)); err == nil {
			t.Errorf("NewTopology(%d, %d links) accepted", tc.n, tc.links)
		}
	}
}

// An empty MIG GPU loses strictly more placeability to any slice than a GPU already in use
// that has room for it, on every model, state and profile: a slice prefers a GPU partly used
// and keeps empty GPUs empty for whole-GPU requests (docs/design/whole-gpus.md).
func TestEmptyGPUIsTheCostliestForEverySlice(t *testing.T) {
	for _, m := range Models() {
		tb := tableFor(m)
		np := tb.nprof()
		for p := 0; p < np; p++ {
			if tb.best[p] == noSlot {
				t.Fatalf("%s: %s does not fit an empty GPU", m, tb.profiles[p].Name)
			}
			for st := 1; st < len(tb.states); st++ {
				k := st*np + p
				if tb.best[k] != noSlot && tb.bestCost[k] >= tb.bestCost[p] {
					t.Errorf("%s %s: state %d costs %d, the empty GPU %d", m, tb.profiles[p].Name, st, tb.bestCost[k], tb.bestCost[p])
				}
			}
		}
	}
}
