package mig

import "testing"

// TestSliceIndexReset: an index reused after Reset answers only what was added since, on as
// many nodes as the last Reset gave, and a fresh index answers nothing.
func TestSliceIndexReset(t *testing.T) {
	at := func(node, gpu, start int) SliceAt {
		return SliceAt{Node: node, GPU: gpu, Placement: Placement{Start: start}}
	}
	var x SliceIndex[string]
	if v, ok := x.At(at(0, 0, 0)); ok {
		t.Fatalf("empty index: At = %q, want nothing", v)
	}
	x.Reset(3)
	x.Add(0, 1, 2, "a")
	x.Add(2, 0, 0, "b")
	x.Add(0, 1, 4, "c")
	x.Add(0, 3, 2, "d")
	for _, tc := range []struct {
		s    SliceAt
		want string
	}{
		{at(0, 1, 2), "a"}, {at(2, 0, 0), "b"}, {at(0, 1, 4), "c"}, {at(0, 3, 2), "d"},
		{at(1, 1, 2), ""}, {at(0, 1, 3), ""}, {at(0, 2, 2), ""}, {at(3, 0, 0), ""}, {at(-1, 0, 0), ""},
	} {
		if v, ok := x.At(tc.s); v != tc.want || ok != (tc.want != "") {
			t.Errorf("At(%+v) = %q, %t; want %q", tc.s, v, ok, tc.want)
		}
	}
	x.Reset(5)
	x.Add(4, 0, 0, "e")
	for _, s := range []SliceAt{at(0, 1, 2), at(2, 0, 0), at(0, 1, 4), at(0, 3, 2)} {
		if v, ok := x.At(s); ok {
			t.Errorf("after Reset: At(%+v) = %q, want nothing", s, v)
		}
	}
	if v, ok := x.At(at(4, 0, 0)); !ok || v != "e" {
		t.Errorf("after Reset: At(node 4) = %q, %t; want e", v, ok)
	}
	x.Reset(5)
	if v, ok := x.At(at(4, 0, 0)); ok {
		t.Errorf("after Reset(5) again: At(node 4) = %q, want nothing", v)
	}
	x.Add(4, 0, 0, "f")
	x.Reset(2)
	if v, ok := x.At(at(4, 0, 0)); ok {
		t.Errorf("after Reset(2): At(node 4) = %q, want nothing (node out of range)", v)
	}
	if got := x.found[:cap(x.found)]; len(got) > 0 && got[0].v != "" {
		t.Errorf("after Reset: the entries added before are still referenced (%q)", got[0].v)
	}
}
