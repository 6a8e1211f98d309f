package mig_test

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slicer-operator/slicer/internal/mig"
)

// goldenProfile is one row of testdata/nvidia-mig-profiles.txt: a profile as NVIDIA publishes
// it. A nil Starts or a negative SMIProfileID is a value NVIDIA does not publish.
type goldenProfile struct {
	Name          string
	SMIProfileID  int
	MaxCount      int
	MemorySlices  int
	ComputeSlices int
	Starts        []int
	MinDriver     int
	TableSource   string
	ListingSource string
}

type goldenModel struct {
	Name          string
	ComputeSlices int
	MemorySlices  int
	Profiles      []goldenProfile
}

// fraction turns a fraction of the GPU ("1/8", "2/7", "Full") into slices of a whole of n.
func fraction(s string, n int) (int, error) {
	if s == "Full" {
		return n, nil
	}
	num, den, ok := strings.Cut(s, "/")
	a, err1 := strconv.Atoi(num)
	b, err2 := strconv.Atoi(den)
	if !ok || err1 != nil || err2 != nil || b == 0 || a*n%b != 0 {
		return 0, fmt.Errorf("fraction %q is not a whole number of %d slices", s, n)
	}
	return a * n / b, nil
}

// placements parses nvidia-smi's {0,2,4}:2 into starts and a size.
func placements(s string) (starts []int, size int, err error) {
	list, sz, ok := strings.Cut(s, ":")
	if !ok || !strings.HasPrefix(list, "{") || !strings.HasSuffix(list, "}") {
		return nil, 0, fmt.Errorf("placements %q are not {starts}:size", s)
	}
	if size, err = strconv.Atoi(sz); err != nil {
		return nil, 0, fmt.Errorf("placements %q: %w", s, err)
	}
	for _, f := range strings.Split(strings.Trim(list, "{}"), ",") {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, 0, fmt.Errorf("placements %q: %w", s, err)
		}
		starts = append(starts, v)
	}
	return starts, size, nil
}

func loadGolden(t *testing.T) []goldenModel {
	t.Helper()
	f, err := os.Open("testdata/nvidia-mig-profiles.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []goldenModel
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		fail := func(err error) { t.Fatalf("testdata/nvidia-mig-profiles.txt:%d: %v", line, err) }
		if fields[0] == "model" {
			if len(fields) != 6 || fields[2] != "compute" || fields[4] != "memory" {
				fail(fmt.Errorf("want: model <name> compute <n> memory <n>"))
			}
			c, err1 := strconv.Atoi(fields[3])
			m, err2 := strconv.Atoi(fields[5])
			if err1 != nil || err2 != nil {
				fail(fmt.Errorf("bad slice counts in %q", text))
			}
			out = append(out, goldenModel{Name: fields[1], ComputeSlices: c, MemorySlices: m})
			continue
		}
		if len(out) == 0 || len(fields) != 9 {
			fail(fmt.Errorf("want a profile row of 9 fields under a model line, got %q", text))
		}
		gm := &out[len(out)-1]
		p := goldenProfile{Name: fields[0], SMIProfileID: -1, TableSource: fields[7], ListingSource: fields[8]}
		if fields[1] != "?" {
			if p.SMIProfileID, err = strconv.Atoi(fields[1]); err != nil {
				fail(err)
			}
		}
		if p.MaxCount, err = strconv.Atoi(fields[2]); err != nil {
			fail(err)
		}
		if p.MemorySlices, err = fraction(fields[3], gm.MemorySlices); err != nil {
			fail(err)
		}
		if p.ComputeSlices, err = fraction(fields[4], gm.ComputeSlices); err != nil {
			fail(err)
		}
		if fields[5] != "unpublished" {
			var size int
			if p.Starts, size, err = placements(fields[5]); err != nil {
				fail(err)
			}
			if size != p.MemorySlices {
				fail(fmt.Errorf("%s: placement size %d, memory fraction %d slices", p.Name, size, p.MemorySlices))
			}
		}
		if fields[6] != "-" {
			if p.MinDriver, err = strconv.Atoi(strings.TrimPrefix(fields[6], "R")); err != nil {
				fail(err)
			}
		}
		gm.Profiles = append(gm.Profiles, p)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every model's table is what NVIDIA publishes, row by row; the values NVIDIA does not publish
// (placements and ids of H200, B200, GH200, ...) are named, for slicer-nvml-probe to confirm.
// Changing a row of either internal/mig/models.go or the fixture fails this test.
func TestTablesMatchNVIDIAsPublishedProfiles(t *testing.T) {
	golden := loadGolden(t)
	byName := map[string]goldenModel{}
	for _, g := range golden {
		byName[g.Name] = g
	}
	var unconfirmed []string
	for _, m := range mig.Models() {
		g, ok := byName[m.String()]
		if !ok {
			t.Errorf("%s: no rows in testdata/nvidia-mig-profiles.txt: a model is added only with NVIDIA's table", m)
			continue
		}
		delete(byName, m.String())
		if g.ComputeSlices != m.ComputeSlices() || g.MemorySlices != m.MemorySlices() {
			t.Errorf("%s: %d compute and %d memory slices, NVIDIA %d and %d", m, m.ComputeSlices(), m.MemorySlices(), g.ComputeSlices, g.MemorySlices)
		}
		var tableNames, goldenNames []string
		rows := map[string]goldenProfile{}
		for _, p := range m.Profiles() {
			tableNames = append(tableNames, p.Name)
		}
		for _, p := range g.Profiles {
			goldenNames = append(goldenNames, p.Name)
			rows[p.Name] = p
		}
		slices.Sort(tableNames)
		slices.Sort(goldenNames)
		if diff := cmp.Diff(goldenNames, tableNames); diff != "" {
			t.Errorf("%s: profiles (-NVIDIA +internal/mig):\n%s", m, diff)
		}
		for _, p := range m.Profiles() {
			want, ok := rows[p.Name]
			if !ok {
				continue
			}
			got := goldenProfile{Name: p.Name, SMIProfileID: p.SMIProfileID, MaxCount: p.MaxCount, MemorySlices: p.MemorySlices,
				ComputeSlices: p.ComputeSlices, Starts: p.Starts, MinDriver: p.MinDriver,
				TableSource: want.TableSource, ListingSource: want.ListingSource}
			if want.SMIProfileID < 0 {
				got.SMIProfileID = -1
				unconfirmed = append(unconfirmed, fmt.Sprintf("%s %s: nvidia-smi id %d", m, p.Name, p.SMIProfileID))
			}
			if want.Starts == nil {
				unconfirmed = append(unconfirmed, fmt.Sprintf("%s %s: placements %v", m, p.Name, p.Placements()))
				got.Starts = nil
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s %s differs from NVIDIA's row (-NVIDIA +internal/mig):\n%s", m, p.Name, diff)
			}
		}
	}
	for name := range byName {
		t.Errorf("NVIDIA's rows for %s match no internal/mig model", name)
	}
	t.Logf("%d values NVIDIA does not publish, left for slicer-nvml-probe to confirm:\n%s", len(unconfirmed), strings.Join(unconfirmed, "\n"))
}
