package plugin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
)

// TestPodFactsSingleSliceRemembersUntilForgotten: the answer is kept per pod UID (a pod's
// slice requests never change), so a later look at the same UID is answered from memory, and
// forget (the pod deleted) drops it.
func TestPodFactsSingleSliceRemembersUntilForgotten(t *testing.T) {
	var s podFacts
	two := builder.Pod("ns", "p").UID("u1").Container("c", builder.Limits(mig.ResourceName("1g.10gb"), "2")).Obj()
	if s.singleSlice(two) {
		t.Fatal("a pod asking for two slices reported as single")
	}
	one := builder.Pod("ns", "p").UID("u1").Container("c", builder.Limits(mig.ResourceName("1g.10gb"), "1")).Obj()
	if s.singleSlice(one) {
		t.Fatal("the same UID answered anew: the first answer was not kept")
	}
	s.forget(types.UID("u1"))
	if !s.singleSlice(one) {
		t.Fatal("after forget the pod's own request must be read again")
	}
	if other := builder.Pod("ns", "q").UID("u2").Container("c", builder.Limits(mig.ResourceName("1g.10gb"), "1")).Obj(); !s.singleSlice(other) {
		t.Fatal("another UID is answered from its own request")
	}
}

// TestPodFactsClassKeyFollowsResourceVersion: a pod's class key is kept while its
// resourceVersion is the one it was computed at, computed again at another (an update may add
// tolerations), never kept for a pod the search did not ask movability of, and dropped by
// forget.
func TestPodFactsClassKeyFollowsResourceVersion(t *testing.T) {
	var s podFacts
	at := func(rv string, tolerations ...corev1.Toleration) *corev1.Pod {
		p := builder.Pod("ns", "p").UID("u1").NodeSelector("zone", "a").Container("c", builder.Limits(mig.ResourceName("1g.10gb"), "1")).Obj()
		p.ResourceVersion = rv
		p.Spec.Tolerations = tolerations
		return p
	}
	tol := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists}
	plain, tolerating := destinationClassOf(at("1")), destinationClassOf(at("1", tol))
	if plain == tolerating {
		t.Fatal("the toleration does not change the encoding: the test cannot tell a stale key")
	}

	// Not asked movability first: not remembered.
	if got := s.classKey(at("1")); got != plain {
		t.Fatalf("class key %q, want %q", got, plain)
	}
	if got := s.classKey(at("1", tol)); got != tolerating {
		t.Fatal("a key was remembered for a pod whose movability was never asked")
	}

	s.singleSlice(at("1"))
	if got := s.classKey(at("1")); got != plain {
		t.Fatalf("class key %q, want %q", got, plain)
	}
	// Same resourceVersion: the remembered key (the spec is the same as far as the API goes).
	if got := s.classKey(at("1", tol)); got != plain {
		t.Fatal("the key at an unchanged resourceVersion was computed again: not remembered")
	}
	// The update that added the toleration: a new resourceVersion, a new key, then kept.
	if got := s.classKey(at("2", tol)); got != tolerating {
		t.Fatal("a stale class key after the pod's update")
	}
	if got := s.classKey(at("2")); got != tolerating {
		t.Fatal("the key computed at resourceVersion 2 was not kept")
	}
	s.forget(types.UID("u1"))
	if got := s.classKey(at("2")); got != plain {
		t.Fatal("forget did not drop the key")
	}
}
