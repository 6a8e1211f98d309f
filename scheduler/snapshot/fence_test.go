package snapshot

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// A node under a driver upgrade takes no slice (issue 42): every GPU unusable, the node's
// reason naming the upgrade; once the fence goes the node is as before, and the change counts
// as room freed so rejected pods are retried.
func TestNodeFence(t *testing.T) {
	c := New(logr.Discard(), nil)
	c.SetNodeAccelerator(accel("n1", 2))
	c.SetAllocation(alloc("a", "p", "n1", "GPU-n1-a", "3g.40gb", 0, 4))
	before := free(c.Node("n1"))
	if before[0] != 4 || before[1] != 7 {
		t.Fatalf("free before the fence %v", before)
	}
	freed := c.FreedGeneration()
	c.SetNodeFence("n1", "Drain")
	n := c.Node("n1")
	if !strings.Contains(n.Reason, "driver is being upgraded (slicer.dev/driver-upgrade=Drain)") {
		t.Errorf("reason %q", n.Reason)
	}
	for i, g := range n.GPUs {
		if g.Usable || n.MIG.GPUs[i].Usable || g.Reason == "" {
			t.Errorf("GPU %d usable on a fenced node: %+v", i, g)
		}
	}
	if c.FreedGeneration() != freed {
		t.Error("fencing a node counted as room freed")
	}
	c.SetNodeFence("n1", "Driver")
	if !strings.Contains(c.Node("n1").Reason, "=Driver") {
		t.Errorf("step not followed: %q", c.Node("n1").Reason)
	}
	c.SetNodeFence("n1", "")
	n = c.Node("n1")
	if n.Reason != "" {
		t.Errorf("reason %q after the fence went", n.Reason)
	}
	if got := free(n); got[0] != before[0] || got[1] != before[1] {
		t.Errorf("free after the fence %v, before %v", got, before)
	}
	if c.FreedGeneration() == freed {
		t.Error("lifting the fence did not count as room freed")
	}
	// A node fenced before its NodeAccelerator exists is fenced once it does.
	c.SetNodeFence("n2", "Verify")
	c.SetNodeAccelerator(accel("n2", 1))
	if c.Node("n2").Reason == "" {
		t.Error("n2 not fenced")
	}
}
