package rightsize

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slicer-operator/slicer/internal/mig"
)

// chain is the agent's step-down series of one H100-80GB (as RecordGPU writes them).
func chain(t *testing.T, node, gpu string) []Step {
	t.Helper()
	var out []Step
	for _, p := range mig.H100_80GB.Profiles() {
		if q, ok := p.StepDown(); ok {
			out = append(out, Step{Node: node, GPU: gpu, Profile: mig.LegalProfileName(p.Name), Smaller: mig.LegalProfileName(q.Name), SmallerBytes: float64(q.MemoryBytes())})
		}
	}
	return out
}

func TestHints(t *testing.T) {
	steps := chain(t, "n1", "0")
	slices := []Slice{
		// 12.9 GB: 2g.20gb holds it, 1g.10gb does not.
		{Namespace: "b", Pod: "infer", Node: "n1", GPU: "0", Profile: "7g.80gb", Placement: "0:8", PeakBytes: 12.9e9},
		// 30 GB on a 3g.40gb: 2g.20gb does not hold it.
		{Namespace: "a", Pod: "train", Node: "n1", GPU: "0", Profile: "3g.40gb", Placement: "0:4", PeakBytes: 30e9},
		// 1 GB on 4g.40gb: down to 1g.10gb.
		{Namespace: "a", Pod: "tiny", Node: "n1", GPU: "0", Profile: "4g.40gb", Placement: "0:4", PeakBytes: 1e9},
		// Nothing is smaller than 1g.10gb.
		{Namespace: "a", Pod: "small", Node: "n1", GPU: "0", Profile: "1g.10gb", Placement: "7:1", PeakBytes: 0},
		// No chain for this GPU (its agent is not scraped).
		{Namespace: "a", Pod: "lost", Node: "n2", GPU: "0", Profile: "7g.80gb", Placement: "0:8", PeakBytes: 0},
	}
	want := []Hint{
		{Slice: slices[2], Next: "2g.20gb", NextBytes: 20e9, Smallest: "1g.10gb", SmallestBytes: 10e9},
		{Slice: slices[0], Next: "4g.40gb", NextBytes: 40e9, Smallest: "2g.20gb", SmallestBytes: 20e9},
	}
	if diff := cmp.Diff(want, Hints(slices, steps)); diff != "" {
		t.Errorf("Hints (-want +got):\n%s", diff)
	}
	// The walk agrees with internal/mig's SmallestFit for every profile and a range of peaks.
	for _, p := range mig.H100_80GB.Profiles() {
		for _, gb := range []float64{0, 5, 10, 10.5, 19, 20, 25, 40, 79} {
			s := Slice{Node: "n1", GPU: "0", Profile: mig.LegalProfileName(p.Name), PeakBytes: gb * 1e9}
			got := Hints([]Slice{s}, steps)
			fit, ok := p.SmallestFit(uint64(gb * 1e9))
			if ok != (len(got) == 1) || ok && got[0].Smallest != mig.LegalProfileName(fit.Name) {
				t.Errorf("%s at %v GB: hints %+v, SmallestFit %s %v", p.Name, gb, got, fit.Name, ok)
			}
		}
	}
}

func TestPeakQuery(t *testing.T) {
	want := `max_over_time(slice:slicer_dcgm_fb_used_bytes:max{pod!=""}[21600s]) and on (UUID, GPU_I_ID, namespace, pod) (slicer_agent_slice_info offset 21600s)`
	if got := PeakQuery(6 * time.Hour); got != want {
		t.Errorf("PeakQuery = %s", got)
	}
}
