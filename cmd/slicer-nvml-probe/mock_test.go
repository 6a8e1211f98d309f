package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia/nvidiamock"
	"github.com/slicer-operator/slicer/internal/mig"
)

// The probe through the real adapter on NVIDIA's go-nvml mock, where any call that would change
// a GPU fails the test: an A100-40GB and an A30 in MIG mode with an instance, a GPU with an
// A100's PCI id and 64 GB (no model), an A100-80GB with MIG mode off. Every profile NVIDIA's
// mock has is listed with its placements, and the only differences from internal/mig are the
// mock's profile ids (it numbers them by NVML enum; nvidia-smi's ids are the table's).
func TestProbeOnNVIDIAMock(t *testing.T) {
	odd := nvidiamock.Configs["A100-40GB"]
	odd.Name, odd.MemoryMB = "NVIDIA A100-SXM4-64GB", 65536
	m, err := nvidiamock.New(nvidiamock.Configs["A100-40GB"], nvidiamock.Configs["A30-24GB"], odd, nvidiamock.Configs["A100-80GB"])
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		m.Mock(i).EnableMIG()
	}
	lib := nvidia.FromInterface(m)
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	// One instance on the A100, made before the probe runs, as an administrator would.
	dev, _ := lib.Device(0)
	info, _ := dev.GPUInstanceProfileInfo(2) // 3g.20gb
	gi, err := dev.CreateGPUInstanceWithPlacement(info, nvml.Placement{Start: 4, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	cinfo, _ := gi.ComputeInstanceProfileInfo(2)
	if _, err := gi.CreateComputeInstance(cinfo); err != nil {
		t.Fatal(err)
	}
	m.Forbid(func(call string) { t.Errorf("the probe called %s", call) })

	var out bytes.Buffer
	if err := run(lib, &out); err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.DriverVersion != nvidiamock.DriverVersion || len(r.Devices) != 4 {
		t.Fatalf("driver %q, %d devices", r.DriverVersion, len(r.Devices))
	}
	for _, tc := range []struct {
		d     Device
		model mig.Model
		pci   string
	}{{r.Devices[0], mig.A100_40GB, "0x20b010de"}, {r.Devices[1], mig.A30_24GB, "0x20b710de"}} {
		d := tc.d
		if d.Model != tc.model.String() || d.PCIDeviceID != tc.pci || d.MIGMode != "Enabled" || len(d.Profiles) != len(tc.model.Profiles()) || len(d.Errors) != 0 {
			t.Errorf("%s: model %q pci %s mode %q profiles %d errors %v", tc.model, d.Model, d.PCIDeviceID, d.MIGMode, len(d.Profiles), d.Errors)
		}
		var ids []string
		for _, p := range tc.model.Profiles() {
			ids = append(ids, fmt.Sprintf("%s: NVML id %d, table %d", p.Name, p.NVMLProfile, p.SMIProfileID))
		}
		if got, want := strings.Join(d.TableDiffs, "\n"), strings.Join(ids, "\n"); got != want {
			t.Errorf("%s: table diffs\n%s\nwant only the mock's ids:\n%s", tc.model, got, want)
		}
		for _, p := range d.Profiles {
			if p.TableName == "" || len(p.Placements) == 0 {
				t.Errorf("%s: profile %+v", tc.model, p)
			}
		}
	}
	if in := r.Devices[0].Instances; len(in) != 1 || in[0].Placement != (nvml.Placement{Start: 4, Size: 4}) || len(in[0].MIGDevices) != 1 {
		t.Errorf("A100 instances %+v", in)
	}
	if d := r.Devices[2]; d.Model != "" || !strings.Contains(d.Recognition, "is not a A100-40GB") ||
		len(d.TableDiffs) != 1 || !strings.HasPrefix(d.TableDiffs[0], "no internal/mig model matches") || len(d.Profiles) == 0 {
		t.Errorf("the 64 GB part: %+v", d)
	}
	if d := r.Devices[3]; d.Model != "A100-80GB" || d.MIGMode != "Disabled" || len(d.Profiles) != 0 {
		t.Errorf("the A100-80GB with MIG off: %+v", d)
	}
}

// mutating names the NVML calls that change a GPU, by the prefix go-nvml's and Slicer's NVML
// interfaces give them.
var mutating = []string{"Create", "Destroy", "Set", "Reset", "Clear", "Enable", "Disable", "Register", "Inject"}

// notNVML are calls with such a name that touch no GPU.
var notNVML = map[string]bool{"SetIndent": true}

// A lint of the probe's own source: it calls no function whose name says it changes a GPU.
// (The runtime check above covers what it calls through device-plugin/nvml.)
func TestProbeSourceCallsNothingThatChangesAGPU(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			name := ""
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			case *ast.Ident:
				name = fn.Name
			}
			for _, p := range mutating {
				if strings.HasPrefix(name, p) && !notNVML[name] {
					t.Errorf("%s: the probe calls %s", fset.Position(call.Pos()), name)
				}
			}
			return true
		})
	}
	if checked < 2 {
		t.Fatalf("checked %d source files", checked)
	}
}
