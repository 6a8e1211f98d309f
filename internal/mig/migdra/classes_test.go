package migdra

import (
	"testing"

	"k8s.io/dynamic-resource-allocation/cel"
)

func TestDeviceClasses(t *testing.T) {
	classes, err := DeviceClasses([]string{"1g.10gb", "3g.40gb", "1g.10gb", "1g.10gb.me"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(classes) != 3 {
		t.Fatalf("%d classes, want 3 (deduplicated)", len(classes))
	}
	want := map[string]string{
		"mig-3g.40gb.mig.slicer.dev":    "nvidia.com/mig-3g.40gb",
		"mig-1g.10gb.mig.slicer.dev":    "nvidia.com/mig-1g.10gb",
		"mig-1g.10gb.me.mig.slicer.dev": "nvidia.com/mig-1g.10gb.me",
	}
	compiler := cel.GetCompiler(cel.Features{})
	for _, c := range classes {
		if got := *c.Spec.ExtendedResourceName; got != want[c.Name] {
			t.Errorf("class %s: extended resource %q, want %q", c.Name, got, want[c.Name])
		}
		p, ok := ProfileOfClass(c.Name)
		if !ok || ClassName(p) != c.Name {
			t.Errorf("class %s: profile %q, %v does not round-trip", c.Name, p, ok)
		}
		if r := compiler.CompileCELExpression(c.Spec.Selectors[0].CEL.Expression, cel.Options{}); r.Error != nil {
			t.Errorf("class %s: selector does not compile: %v", c.Name, r.Error)
		}
	}
	if _, err := DeviceClasses([]string{"9g.1tb"}, false); err == nil {
		t.Error("an unknown profile was accepted")
	}
	plain, _ := DeviceClasses([]string{"1g.10gb"}, false)
	if plain[0].Spec.ExtendedResourceName != nil {
		t.Error("extendedResources=false still names an extended resource")
	}
	if _, ok := ProfileOfClass("gpu.example.com"); ok {
		t.Error("a foreign class maps to a profile")
	}
}
