package mig

import "testing"

// Which models wait for a GPU reset after a MIG mode change, written out per model so that a
// new model needs a decision here (NVIDIA's MIG user guide, "Enable MIG Mode": the Ampere
// GPUs do, Hopper and later do not).
func TestModeChangeNeedsReset(t *testing.T) {
	want := map[Model]bool{
		A30_24GB: true, A100_40GB: true, A100_80GB: true,
		H100_80GB: false, H100_94GB: false, GH200_96GB: false, H200_141GB: false, B200_180GB: false,
		GB200_186GB: false, GH200_144GB: false, H20_96GB: false, B300_288GB: false, GB300_288GB: false,
	}
	for _, m := range Models() {
		w, ok := want[m]
		if !ok {
			t.Errorf("%s: no expectation: decide from NVIDIA's MIG user guide", m)
			continue
		}
		if got := m.ModeChangeNeedsReset(); got != w {
			t.Errorf("%s: ModeChangeNeedsReset = %v, want %v", m, got, w)
		}
	}
	if Model(0).ModeChangeNeedsReset() {
		t.Errorf("the zero Model needs a reset; want false (not known)")
	}
}
