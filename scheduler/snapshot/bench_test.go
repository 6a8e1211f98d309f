package snapshot

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// BenchmarkRebuild measures one node's snapshot rebuild (every NodeAccelerator update, every
// allocation and reservation change runs one): 8 H100s, each with three slices the agent
// reports, two of them held by allocations, and a third allocation not realized yet.
func BenchmarkRebuild(b *testing.B) {
	c := New(logr.Discard(), nil)
	na := accel("n1", 8)
	for i := range na.Status.GPUs {
		g := &na.Status.GPUs[i]
		g.Slices = []slicerv1alpha1.MIGSlice{
			{Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 4}},
			{Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: 4, Size: 1}},
			{Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: 5, Size: 1}},
		}
		c.SetAllocation(alloc(fmt.Sprintf("a%d", i), fmt.Sprintf("p%d", i), "n1", g.UUID, "3g.40gb", 0, 4))
		c.SetAllocation(alloc(fmt.Sprintf("b%d", i), fmt.Sprintf("q%d", i), "n1", g.UUID, "1g.10gb", 4, 1))
		c.SetAllocation(alloc(fmt.Sprintf("c%d", i), fmt.Sprintf("r%d", i), "n1", g.UUID, "1g.10gb", 6, 1))
	}
	c.SetNodeAccelerator(na)
	if n := c.Node("n1"); n.Reason != "" || free(n)[0] != 1 {
		b.Fatalf("node %q, free %v: want usable GPUs with 1 compute slice free", n.Reason, free(n))
	}
	b.ReportAllocs()
	for b.Loop() {
		c.SetNodeAccelerator(na)
	}
}
