package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
	"github.com/slicer-operator/slicer/internal/mig"
)

func TestProbeIsReadOnlyAndMatchesTables(t *testing.T) {
	b, err := emulated.New(emulated.Options{Node: "n", GPUs: []mig.Model{mig.H100_80GB, mig.A30_24GB, mig.B200_180GB}, MIGDisabled: []int{2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateInstance(0, "3g.40gb", 4, false); err != nil {
		t.Fatal(err)
	}
	before := b.Instances()
	var out bytes.Buffer
	if err := run(b, &out); err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Devices) != 3 {
		t.Fatalf("%d devices", len(r.Devices))
	}
	h100 := r.Devices[0]
	if h100.Model != "H100-80GB" || h100.MIGMode != "Enabled" || len(h100.Profiles) != len(mig.H100_80GB.Profiles()) || len(h100.TableDiffs) != 0 {
		t.Errorf("H100: model %q mode %q profiles %d diffs %v", h100.Model, h100.MIGMode, len(h100.Profiles), h100.TableDiffs)
	}
	if len(h100.Instances) != 1 || h100.Instances[0].Placement != (nvml.Placement{Start: 4, Size: 4}) {
		t.Errorf("H100 instances %+v", h100.Instances)
	}
	if r.Devices[1].Model != "A30-24GB" || len(r.Devices[1].TableDiffs) != 0 {
		t.Errorf("A30: %+v", r.Devices[1])
	}
	if r.Devices[2].MIGMode != "Disabled" || len(r.Devices[2].Profiles) != 0 {
		t.Errorf("B200 with MIG off: %+v", r.Devices[2])
	}
	for _, op := range []string{emulated.OpCreateGPUInstance, emulated.OpCreateComputeInstance, emulated.OpDestroyComputeInst, emulated.OpDestroyGPUInstance} {
		if n := b.Calls(op); n != 0 {
			t.Errorf("the probe called %s %d times", op, n)
		}
	}
	if len(b.Instances()) != len(before) {
		t.Errorf("instances changed")
	}
}

func TestCompareReportsDifferences(t *testing.T) {
	p, _ := mig.H100_80GB.Profile("3g.40gb")
	// go-nvml's H100 mock lists 3_SLICE placements of size 3: the probe must say so.
	got := compare(mig.H100_80GB, []Profile{{NVMLProfile: p.NVMLProfile, ID: p.SMIProfileID, SliceCount: 3, InstanceCount: 2,
		Placements: []nvml.Placement{{Start: 0, Size: 3}, {Start: 4, Size: 3}}}}, "580.82.07")
	joined := strings.Join(got, "\n")
	if !strings.Contains(joined, "3g.40gb: NVML placements") || !strings.Contains(joined, "1g.10gb (profile 0): in the table, not reported") {
		t.Errorf("diffs:\n%s", joined)
	}
}

func TestNoDriver(t *testing.T) {
	lib := nvidia.New("/nonexistent/libnvidia-ml.so.1")
	err := run(lib, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "NVML library not found / driver not loaded") {
		t.Errorf("without a driver: %v", err)
	}
}

// A profile a driver too old for it does not report is not a table error: the diff says why.
func TestCompareNamesTheDriverAProfileNeeds(t *testing.T) {
	got := strings.Join(compare(mig.A100_40GB, nil, "470.256.02"), "\n")
	if !strings.Contains(got, "1g.10gb (profile 9): in the table, not reported by NVML (the table says it needs R525; the driver is 470.256.02)") {
		t.Errorf("diffs:\n%s", got)
	}
}
