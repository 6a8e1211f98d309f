package sim

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Replays with moves keep the bookkeeping of moved requests right (a departure releases the
// slice where its request was moved to, or Run fails), count the moves, accept more slice-time
// than the same trace without moves, and refuse the frontends they do not model.
func TestRunWithMoves(t *testing.T) {
	tr := busyTrace(2)
	plain, err := Run(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	moved, err := Run(tr, Options{DefragMoves: 2, Decisions: &buf})
	if err != nil {
		t.Fatal(err)
	}
	if moved.Policy != "slicer + moves ≤2" {
		t.Errorf("policy %q", moved.Policy)
	}
	if moved.Moves == 0 || moved.DefragPlans == 0 || moved.DefragPlans > moved.Moves || moved.Moves > 2*moved.DefragPlans {
		t.Fatalf("moves %d in %d plans", moved.Moves, moved.DefragPlans)
	}
	// Moves admit large slices the plain replay turns away: more accepted slice-time.
	if moved.Acceptance <= plain.Acceptance {
		t.Errorf("acceptance %v with moves, %v without", moved.Acceptance, plain.Acceptance)
	}
	t.Logf("acceptance %v (count %v) with %d moves in %d plans, %v (count %v) without", moved.Acceptance, moved.AcceptanceCount,
		moved.Moves, moved.DefragPlans, plain.Acceptance, plain.AcceptanceCount)
	if want := round4(float64(moved.Moves) / float64(moved.Accepted)); moved.MovesPerAccepted != want {
		t.Errorf("moves per accepted %v, want %v", moved.MovesPerAccepted, want)
	}
	sum, plans := 0, 0
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var d Decision
		if err := dec.Decode(&d); err != nil {
			t.Fatal(err)
		}
		if d.Moves > 0 {
			if !d.Accepted {
				t.Fatalf("decision %+v has moves but is not accepted", d)
			}
			sum += d.Moves
			plans++
		}
	}
	if sum != moved.Moves || plans != moved.DefragPlans {
		t.Errorf("decisions carry %d moves in %d plans, the result %d in %d", sum, plans, moved.Moves, moved.DefragPlans)
	}
	if _, err := Run(tr, Options{DefragMoves: 2, Elastic: true}); err == nil {
		t.Error("moves in elastic mode accepted")
	}
	if _, err := Run(tr, Options{DefragMoves: 2, Frontend: StockDRA}); err == nil {
		t.Error("moves with the stock DRA frontend accepted")
	}
}

// Replays with repack plans keep the bookkeeping right through Ordered plans (a moved slice
// re-created where another moved slice was), count them among the plans, and name them.
func TestRunWithRepack(t *testing.T) {
	tr := busyTrace(2)
	moved, err := Run(tr, Options{DefragMoves: 4})
	if err != nil {
		t.Fatal(err)
	}
	repacked, err := Run(tr, Options{DefragMoves: 4, RepackGPUs: 4})
	if err != nil {
		t.Fatal(err)
	}
	if repacked.Policy != "slicer + moves ≤4 + repack ≤4 GPUs" {
		t.Errorf("policy %q", repacked.Policy)
	}
	if repacked.Repacks == 0 || repacked.Repacks > repacked.DefragPlans || repacked.Moves > 4*repacked.DefragPlans {
		t.Fatalf("%d repack plans among %d plans of %d moves", repacked.Repacks, repacked.DefragPlans, repacked.Moves)
	}
	t.Logf("acceptance %v with %d repack plans (%d plans, %d moves), %v with moves alone (%d plans, %d moves)", repacked.Acceptance,
		repacked.Repacks, repacked.DefragPlans, repacked.Moves, moved.Acceptance, moved.DefragPlans, moved.Moves)
	if moved.Repacks != 0 {
		t.Errorf("%d repack plans without RepackGPUs", moved.Repacks)
	}
}
