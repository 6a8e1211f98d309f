package snapshot

import (
	"reflect"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// TestNodeLacks: a node's snapshot lists the profiles its driver lacks on its GPUs' models
// (NVIDIA's A100-40GB has 1g.5gb+me from R470, 1g.10gb from R525), kept across the agent's
// status writes and recomputed when the driver or a GPU's model changes; a node whose driver
// version has no branch, or is not reported, lacks nothing.
func TestNodeLacks(t *testing.T) {
	a100 := func(driver string, models ...slicerv1alpha1.GPUModel) *slicerv1alpha1.NodeAccelerator {
		return accel("n1", len(models), func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.DriverVersion = driver
			for i, m := range models {
				na.Status.GPUs[i].Model = m
			}
		})
	}
	lacks := func(n *Node) []string {
		var out []string
		for p := range n.Lacks {
			out = append(out, p)
		}
		slices.Sort(out)
		return out
	}
	c := New(logr.Discard(), nil)
	for _, step := range []struct {
		name string
		na   *slicerv1alpha1.NodeAccelerator
		want []string
	}{
		{"R460", a100("460.106.00", "A100-40GB"), []string{"1g.10gb", "1g.5gb+me"}},
		{"R470", a100("470.82.01", "A100-40GB"), []string{"1g.10gb"}},
		{"R470, an H100 beside", a100("470.82.01", "A100-40GB", "H100-80GB"), []string{"1g.10gb"}},
		{"R470, H100s only", a100("470.82.01", "H100-80GB", "H100-80GB"), nil},
		{"R535", a100("535.104.05", "A100-40GB"), nil},
		{"no branch", a100("unknown", "A100-40GB"), nil},
		{"not reported", a100("", "A100-40GB"), nil},
	} {
		c.SetNodeAccelerator(step.na)
		if diff := cmp.Diff(step.want, lacks(c.Node("n1"))); diff != "" {
			t.Errorf("%s: Lacks (-want +got):\n%s", step.name, diff)
		}
	}
	c.SetNodeAccelerator(a100("470.82.01", "A100-40GB"))
	before := reflect.ValueOf(c.Node("n1").Lacks).Pointer()
	withSlice := a100("470.82.01", "A100-40GB")
	withSlice.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{{Profile: "1g.5gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 1}}}
	c.SetNodeAccelerator(withSlice)
	if reflect.ValueOf(c.Node("n1").Lacks).Pointer() != before {
		t.Error("a status write with the same driver and models computed Lacks again")
	}
	want := "the node's NVIDIA driver 470.82.01 has no MIG profile 1g.10gb on A100-40GB: it needs R525 or later"
	if got := c.Node("n1").Lacks["1g.10gb"]; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	c.DeleteNodeAccelerator("n1")
	if len(c.lacks) != 0 {
		t.Errorf("a deleted node's Lacks are kept: %v", c.lacks)
	}
}
