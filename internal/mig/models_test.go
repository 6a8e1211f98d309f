package mig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type profileRow struct {
	Name          string
	NVML, SMI, CI int
	Compute, Size int
	Max           int
	Starts        []int
	Media         bool
}

// eightSlice is the placement table of docs/design/geometry.md for one memory naming.
func eightSlice(n1, n1d, n2, n3, n7 string) []profileRow {
	all := []int{0, 1, 2, 3, 4, 5, 6}
	return []profileRow{
		{n1, 0, 19, 0, 1, 1, 7, all, false},
		{n1 + "+me", 7, 20, 0, 1, 1, 1, all, true},
		{n1d, 9, 15, 0, 1, 2, 4, []int{0, 2, 4, 6}, false},
		{"2g." + n2, 1, 14, 1, 2, 2, 3, []int{0, 2, 4}, false},
		{"3g." + n3, 2, 9, 2, 3, 4, 2, []int{0, 4}, false},
		{"4g." + n3, 3, 5, 3, 4, 4, 1, []int{0}, false},
		{"7g." + n7, 4, 0, 4, 7, 8, 1, []int{0}, false},
	}
}

func TestModelTablesMatchDesign(t *testing.T) {
	cases := []struct {
		model  Model
		rows   []profileRow
		states int
	}{
		{A100_40GB, eightSlice("1g.5gb", "1g.10gb", "10gb", "20gb", "40gb"), 2319},
		{A100_80GB, eightSlice("1g.10gb", "1g.20gb", "20gb", "40gb", "80gb"), 2319},
		{H100_80GB, eightSlice("1g.10gb", "1g.20gb", "20gb", "40gb", "80gb"), 2319},
		{H100_94GB, eightSlice("1g.12gb", "1g.24gb", "24gb", "47gb", "94gb"), 2319},
		{GH200_96GB, eightSlice("1g.12gb", "1g.24gb", "24gb", "48gb", "96gb"), 2319},
		{H200_141GB, eightSlice("1g.18gb", "1g.35gb", "35gb", "71gb", "141gb"), 2319},
		{B200_180GB, eightSlice("1g.23gb", "1g.45gb", "45gb", "90gb", "180gb"), 2319},
		{GB200_186GB, eightSlice("1g.23gb", "1g.47gb", "47gb", "93gb", "186gb"), 2319},
		{GH200_144GB, eightSlice("1g.18gb", "1g.36gb", "36gb", "72gb", "144gb"), 2319},
		{H20_96GB, eightSlice("1g.12gb", "1g.24gb", "24gb", "48gb", "96gb"), 2319},
		{B300_288GB, eightSlice("1g.34gb", "1g.67gb", "67gb", "135gb", "269gb"), 2319},
		{GB300_288GB, eightSlice("1g.35gb", "1g.70gb", "70gb", "139gb", "278gb"), 2319},
		{A30_24GB, []profileRow{
			{"1g.6gb", 0, 14, 0, 1, 1, 4, []int{0, 1, 2, 3}, false},
			{"1g.6gb+me", 7, 21, 0, 1, 1, 1, []int{0, 1, 2, 3}, true},
			{"2g.12gb", 1, 5, 1, 2, 2, 2, []int{0, 2}, false},
			{"2g.12gb+me", 8, 6, 1, 2, 2, 1, []int{0, 2}, true},
			{"4g.24gb", 3, 0, 3, 4, 4, 1, []int{0}, false},
		}, 76},
	}
	for _, tc := range cases {
		t.Run(tc.model.String(), func(t *testing.T) {
			var got []profileRow
			for _, p := range tc.model.Profiles() {
				got = append(got, profileRow{p.Name, p.NVMLProfile, p.SMIProfileID, p.ComputeInstanceProfile,
					p.ComputeSlices, p.MemorySlices, p.MaxCount, p.Starts, p.MediaExtensions})
				// Every legal placement on an empty GPU is a candidate, in NVML order.
				if diff := cmp.Diff(p.Placements(), EmptyGPU(tc.model).Candidates(p)); diff != "" {
					t.Errorf("%s candidates on an empty GPU (-want +got):\n%s", p.Name, diff)
				}
			}
			if diff := cmp.Diff(tc.rows, got); diff != "" {
				t.Errorf("profiles (-want +got):\n%s", diff)
			}
			if n := len(tableFor(tc.model).states); n != tc.states {
				t.Errorf("legal states = %d, want %d", n, tc.states)
			}
		})
	}
}

func TestProfileNames(t *testing.T) {
	for _, in := range []string{"1g.10gb+me", "1g.10gb.me"} {
		got, err := ParseProfileName(in)
		if err != nil || got != "1g.10gb+me" {
			t.Errorf("ParseProfileName(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "1g", "3g.41gb", "1g.10gb+", "x.10gb"} {
		if _, err := ParseProfileName(bad); err == nil {
			t.Errorf("ParseProfileName(%q) accepted", bad)
		}
	}
	p, err := H100_80GB.Profile("1g.10gb.me")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"1g.10gb.me", "slicer.dev/mig-1g.10gb.me", "nvidia.com/mig-1g.10gb.me"},
		[]string{p.LegalName(), p.ResourceName(), p.NVIDIAResourceName()}); diff != "" {
		t.Error(diff)
	}
	if got, ok := ProfileNameFromResource("nvidia.com/mig-3g.40gb"); !ok || got != "3g.40gb" {
		t.Errorf("ProfileNameFromResource = %q, %v", got, ok)
	}
	known := KnownProfileNames()
	for _, n := range known {
		if strings.Contains(n, "+") {
			t.Errorf("known name %q is not legal in a resource name", n)
		}
	}
	if known[0] != "1g.5gb" || known[len(known)-1] != "7g.278gb" {
		t.Errorf("KnownProfileNames order: %v", known)
	}
	if diff := cmp.Diff([]Model{A100_80GB, H100_80GB}, ModelsSupporting("3g.40gb")); diff != "" {
		t.Error(diff)
	}
	// 1g.10gb is the double-memory 1g on A100-40GB and the plain 1g elsewhere.
	a, _ := A100_40GB.Profile("1g.10gb")
	h, _ := H100_80GB.Profile("1g.10gb")
	if a.NVMLProfile != 9 || a.MemorySlices != 2 || h.NVMLProfile != 0 || h.MemorySlices != 1 {
		t.Errorf("1g.10gb: A100-40GB %+v, H100-80GB %+v", a, h)
	}
}
