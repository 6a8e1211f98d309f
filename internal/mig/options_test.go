package mig

import (
	"testing"
)

// A profile's option is data, spelled as NVIDIA spells it after the size, and as Kubernetes
// allows it in resource names; every table row's name is its size and option.
func TestProfileOptions(t *testing.T) {
	for _, tc := range []struct{ nvidia, legal string }{
		{"1g.10gb", "1g.10gb"},
		{"1g.10gb+me", "1g.10gb.me"},
		{"1g.24gb+me.all", "1g.24gb.me.all"},
		{"1g.24gb-me", "1g.24gb-me"},
		{"4g.96gb+gfx", "4g.96gb.gfx"},
	} {
		if got := LegalProfileName(tc.nvidia); got != tc.legal {
			t.Errorf("LegalProfileName(%q) = %q, want %q", tc.nvidia, got, tc.legal)
		}
		for _, in := range []string{tc.nvidia, tc.legal} {
			if got := canonicalProfileName(in); got != tc.nvidia {
				t.Errorf("canonicalProfileName(%q) = %q, want %q", in, got, tc.nvidia)
			}
		}
	}
	for _, bad := range []string{"1g.10gb+gfx.me", "1g.10gb+", "1g.10gb.all", "1g.10gbme"} {
		if _, _, _, ok := parseProfileName(bad); ok {
			t.Errorf("parseProfileName(%q) accepted", bad)
		}
	}
	for _, m := range Models() {
		for _, ps := range m.spec().profiles {
			if want := spellProfile(ps.compute, ps.memoryGiB, ps.option); ps.name != want {
				t.Errorf("%s: profile %q is spelled %q by its size and option", m, ps.name, want)
			}
		}
	}
}

// A driver whose branch is older than a profile's MinDriver does not have it; a version with no
// branch in it (what NVML cannot say) is not held against it.
func TestSupportedBy(t *testing.T) {
	p, err := A100_40GB.Profile("1g.10gb")
	if err != nil {
		t.Fatal(err)
	}
	if p.MinDriver != 525 {
		t.Fatalf("A100-40GB 1g.10gb needs R%d, NVIDIA says R525", p.MinDriver)
	}
	for v, want := range map[string]bool{"470.256.02": false, "520.61.05": false, "525.85.12": true, "580.82.07": true,
		"emulated-580.0": true, "emulated-470.0": false, "": true, "unknown": true} {
		if got := p.SupportedBy(v); got != want {
			t.Errorf("1g.10gb on driver %q: %v, want %v", v, got, want)
		}
	}
	whole, err := A100_40GB.Profile("7g.40gb")
	if err != nil {
		t.Fatal(err)
	}
	if !whole.SupportedBy("450.80.02") {
		t.Error("7g.40gb is on every MIG driver")
	}
}
