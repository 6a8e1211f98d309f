package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The orphan clock both frontends sweep by: an orphan is never due on the pass that first
// finds it, only once it stayed one for the grace.
func TestDueNeverAtFirstSightAndOnlyAfterGrace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	since := OrphanClock{}
	if got := since.Pass([]string{"a"}, t0, 0); len(got) != 0 {
		t.Fatalf("due at first sight: %v", got)
	}
	if got := since.Pass([]string{"a", "b"}, t0.Add(30*time.Second), time.Minute); len(got) != 0 {
		t.Fatalf("due before the grace: %v", got)
	}
	if got := since.Pass([]string{"a", "b"}, t0.Add(time.Minute), time.Minute); !cmp.Equal(got, []string{"a"}) {
		t.Fatalf("due after a's grace = %v, want [a]", got)
	}
	// b stops being an orphan and comes back: its clock restarts.
	since.Pass([]string{"a"}, t0.Add(2*time.Minute), time.Minute)
	if _, ok := since["b"]; ok {
		t.Fatal("b not forgotten")
	}
	if got := since.Pass([]string{"b"}, t0.Add(3*time.Minute), time.Minute); len(got) != 0 {
		t.Fatalf("b due at its second first sight: %v", got)
	}
}
