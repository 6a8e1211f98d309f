package plugin

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
)

// TestSingleSlicesRemembersUntilForgotten: the answer is kept per pod UID (a pod's slice
// requests never change), so a later look at the same UID is answered from memory, and
// forget (the pod deleted) drops it.
func TestSingleSlicesRemembersUntilForgotten(t *testing.T) {
	var s singleSlices
	two := builder.Pod("ns", "p").UID("u1").Container("c", builder.Limits(mig.ResourceName("1g.10gb"), "2")).Obj()
	if s.of(two) {
		t.Fatal("a pod asking for two slices reported as single")
	}
	one := builder.Pod("ns", "p").UID("u1").Container("c", builder.Limits(mig.ResourceName("1g.10gb"), "1")).Obj()
	if s.of(one) {
		t.Fatal("the same UID answered anew: the first answer was not kept")
	}
	s.forget(types.UID("u1"))
	if !s.of(one) {
		t.Fatal("after forget the pod's own request must be read again")
	}
	if other := builder.Pod("ns", "q").UID("u2").Container("c", builder.Limits(mig.ResourceName("1g.10gb"), "1")).Obj(); !s.of(other) {
		t.Fatal("another UID is answered from its own request")
	}
}
