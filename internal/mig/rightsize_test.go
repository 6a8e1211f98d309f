package mig

import "testing"

func TestStepDownAndSmallestFit(t *testing.T) {
	prof := func(m Model, name string) Profile {
		t.Helper()
		p, err := m.Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const gb = 1_000_000_000
	tests := []struct {
		model    Model
		from     string
		stepDown string // "" when none
		peak     uint64
		smallest string // "" when nothing smaller holds peak
	}{
		// 4g.40gb steps down to the 20 GB profile with the most compute.
		{model: H100_80GB, from: "4g.40gb", stepDown: "2g.20gb", peak: 9 * gb, smallest: "1g.10gb"},
		{model: H100_80GB, from: "7g.80gb", stepDown: "4g.40gb", peak: 15 * gb, smallest: "2g.20gb"},
		// Exactly the nominal memory fits; a byte more does not.
		{model: H100_80GB, from: "3g.40gb", stepDown: "2g.20gb", peak: 20 * gb, smallest: "2g.20gb"},
		{model: H100_80GB, from: "3g.40gb", stepDown: "2g.20gb", peak: 20*gb + 1, smallest: ""},
		// The smallest profiles have nothing below them; +me is not a step down of its twin.
		{model: H100_80GB, from: "1g.10gb", stepDown: "", peak: 0, smallest: ""},
		{model: H100_80GB, from: "1g.10gb+me", stepDown: "", peak: 0, smallest: ""},
		{model: H100_80GB, from: "1g.20gb", stepDown: "1g.10gb", peak: 5 * gb, smallest: "1g.10gb"},
		{model: A100_40GB, from: "7g.40gb", stepDown: "4g.20gb", peak: 4 * gb, smallest: "1g.5gb"},
	}
	for _, tc := range tests {
		p := prof(tc.model, tc.from)
		got, ok := p.StepDown()
		if name := map[bool]string{true: got.Name}[ok]; name != tc.stepDown {
			t.Errorf("%s %s StepDown = %q, want %q", tc.model, tc.from, name, tc.stepDown)
		}
		fit, ok := p.SmallestFit(tc.peak)
		if name := map[bool]string{true: fit.Name}[ok]; name != tc.smallest {
			t.Errorf("%s %s SmallestFit(%d) = %q, want %q", tc.model, tc.from, tc.peak, name, tc.smallest)
		}
	}
	if got := prof(H100_80GB, "1g.10gb").MemoryBytes(); got != 10*gb {
		t.Errorf("1g.10gb MemoryBytes = %d", got)
	}
}
