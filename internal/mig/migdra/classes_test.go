package migdra

import (
	"context"
	"slices"
	"testing"

	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/slicer-operator/slicer/internal/mig"
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

// The whole-GPU class selects exactly the whole devices of a pool (of a switchable GPU and of
// a GPU with MIG mode off), names nvidia.com/gpu with the bridge, and no profile class selects
// a whole device.
func TestWholeDeviceClassSelectsWholeGPUs(t *testing.T) {
	h100, _ := mig.ParseModel("H100-80GB")
	pool, err := Pool([]GPU{
		{Index: 0, UUID: "GPU-0", State: mig.EmptyGPU(h100), MIGEnabled: true, Switchable: true, Healthy: true},
		{Index: 1, UUID: "GPU-1", State: mig.EmptyGPU(h100), MIGEnabled: true, Healthy: true},
		{Index: 2, UUID: "GPU-2", Healthy: true},
	}, mig.PreferredOrder)
	if err != nil {
		t.Fatal(err)
	}
	c := WholeDeviceClass(true)
	if c.Name != WholeClassName || c.Spec.ExtendedResourceName == nil || *c.Spec.ExtendedResourceName != "nvidia.com/gpu" {
		t.Fatalf("class %s, extended resource %v", c.Name, c.Spec.ExtendedResourceName)
	}
	if WholeDeviceClass(false).Spec.ExtendedResourceName != nil {
		t.Error("extendedResources=false still names nvidia.com/gpu")
	}
	compiler := cel.GetCompiler(cel.Features{})
	whole := compiler.CompileCELExpression(c.Spec.Selectors[0].CEL.Expression, cel.Options{})
	profile := compiler.CompileCELExpression(ProfileSelector("7g.80gb"), cel.Options{})
	if whole.Error != nil || profile.Error != nil {
		t.Fatalf("selectors: %v, %v", whole.Error, profile.Error)
	}
	var selected []string
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			in := cel.Device{Driver: DriverName, Attributes: d.Attributes, Capacity: d.Capacity}
			ok, _, err := whole.DeviceMatches(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				selected = append(selected, d.Name)
			}
			if _, isWhole := ParseWholeDeviceName(d.Name); isWhole {
				if ok, _, _ := profile.DeviceMatches(context.Background(), in); ok {
					t.Errorf("the 7g.80gb class selects whole device %s", d.Name)
				}
			}
		}
	}
	slices.Sort(selected)
	if want := []string{"gpu-0", "gpu-2"}; !slices.Equal(selected, want) {
		t.Errorf("whole class selects %v, want %v (GPU 1 is MIG only)", selected, want)
	}
}
