package main

import (
	"os"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

func TestReadStatOwnProcess(t *testing.T) {
	comm, ppid, cpu, err := readStat("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	if ppid != os.Getppid() {
		t.Errorf("ppid = %d, want %d", ppid, os.Getppid())
	}
	if comm == "" || cpu < 0 {
		t.Errorf("comm %q, cpu %s", comm, cpu)
	}
}

func TestReadStatCommandWithSpacesAndParentheses(t *testing.T) {
	// proc(5): the command name is in parentheses and may itself hold spaces and ')'.
	line := "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 0 0\n"
	path := t.TempDir() + "/stat"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	comm, ppid, cpu, err := readStat(path)
	if err != nil {
		t.Fatal(err)
	}
	if comm != "a) b (c)" || ppid != 17 || cpu != 3*time.Second {
		t.Errorf("got %q ppid %d cpu %s; want %q ppid 17 cpu 3s", comm, ppid, cpu, "a) b (c)")
	}
}

func TestProfileCPUCountsOnlyLabelledSamplesAsScheduler(t *testing.T) {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Value: []int64{1, int64(10 * time.Millisecond)}, Label: map[string][]string{componentLabel: {"scheduler"}}},
			{Value: []int64{1, int64(20 * time.Millisecond)}, Label: map[string][]string{componentLabel: {"other"}}},
			{Value: []int64{1, int64(40 * time.Millisecond)}},
			{Value: []int64{1, int64(5 * time.Millisecond)}, Label: map[string][]string{componentLabel: {"scheduler"}}},
		},
	}
	sched, all := profileCPU(p)
	if sched != 15*time.Millisecond || all != 75*time.Millisecond {
		t.Errorf("scheduler %s, all %s; want 15ms, 75ms", sched, all)
	}
}

func TestSpreadOf(t *testing.T) {
	s := spreadOf([]float64{0.5, 0.3, 0.4, 0.6})
	if s.median != 0.45 || s.lo != 0.3 || s.hi != 0.6 || s.n != 4 {
		t.Errorf("got %+v", s)
	}
	if got, want := s.text("%.2f"), "0.45 [0.30 – 0.60] ±33%"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
}
