package cdi_test

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/slicer-operator/slicer/device-plugin/cdi"
)

// A whole GPU's spec names the GPU, is read back by the CDI library as a runtime reads it,
// and in real mode gives the container the GPU's device node and the driver's control nodes,
// no MIG capability.
func TestWholeGPUSpec(t *testing.T) {
	for _, real := range []bool{false, true} {
		w := &cdi.Writer{Dir: t.TempDir(), Real: real}
		name, err := w.WriteWhole(cdi.WholeGPU{UUID: "GPU-1234", Minor: 5})
		if err != nil {
			t.Fatal(err)
		}
		if name != "slicer.dev/mig=GPU-1234" {
			t.Errorf("qualified name %q", name)
		}
		if err := cdi.Validate(w.Path("GPU-1234")); err != nil {
			t.Fatal(err)
		}
		spec, err := cdiapi.ReadSpec(w.Path("GPU-1234"), 0)
		if err != nil {
			t.Fatal(err)
		}
		dev := spec.GetDevice("GPU-1234")
		if dev == nil {
			t.Fatal("device missing from spec")
		}
		env := append([]string(nil), dev.ContainerEdits.Env...)
		sort.Strings(env)
		if d := cmp.Diff([]string{"NVIDIA_VISIBLE_DEVICES=GPU-1234", "SLICER_GPU_UUID=GPU-1234"}, env); d != "" {
			t.Errorf("real %v: env (-want +got):\n%s", real, d)
		}
		var nodes []string
		for _, n := range dev.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
		var want []string
		if real {
			want = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia5"}
		}
		if d := cmp.Diff(want, nodes); d != "" {
			t.Errorf("real %v: device nodes (-want +got):\n%s", real, d)
		}
		// It is kept or removed as the slices' specs are.
		if removed, err := w.RemoveStale(map[string]bool{}); err != nil || len(removed) != 1 || removed[0] != "GPU-1234" {
			t.Errorf("RemoveStale = %v, %v; want [GPU-1234]", removed, err)
		}
	}
}
