package sim

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
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

// Only the pods the scheduler's rules let move are moved: none of a trace of bare pods or pods
// annotated slicer.dev/movable: "false" (AllMovable moves them), and of a mixed trace only
// pods of a controller without the annotation.
func TestRunMovesOnlyMovablePods(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(ev *Event)
	}{
		{"bare", func(ev *Event) { ev.Controller = "" }},
		{"annotated", func(ev *Event) { ev.Unmovable = true }},
		{"DaemonSet", func(ev *Event) { ev.Controller = "DaemonSet" }},
	} {
		tr := busyTrace(2)
		for i := range tr.Events {
			if tr.Events[i].Arrive != "" {
				c.set(&tr.Events[i])
			}
		}
		res, err := Run(tr, Options{DefragMoves: 2, MaxEvictions: -1})
		if err != nil {
			t.Fatal(err)
		}
		all, err := Run(tr, Options{DefragMoves: 2, MaxEvictions: -1, AllMovable: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Moves != 0 || all.Moves == 0 {
			t.Errorf("%s: %d moves, %d with every pod movable; want 0 and some", c.name, res.Moves, all.Moves)
		}
	}
	tr := busyTrace(2)
	pinned := map[string]bool{}
	for i := range tr.Events {
		if ev := &tr.Events[i]; ev.Arrive != "" && i%3 == 0 {
			ev.Controller, pinned[ev.Arrive] = "", true
		}
	}
	var buf bytes.Buffer
	res, err := Run(tr, Options{DefragMoves: 2, MaxEvictions: -1, Decisions: &buf})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moves == 0 {
		t.Fatal("no moves on the mixed trace")
	}
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var d Decision
		if err := dec.Decode(&d); err != nil {
			t.Fatal(err)
		}
		for _, id := range d.Moved {
			if pinned[id] {
				t.Fatalf("%s moved bare pod %s", d.ID, id)
			}
		}
	}
}

// The eviction cap holds: at most MaxEvictions moves within any EvictionWindow (here the whole
// trace), the plans over it refused and counted.
func TestRunEvictionCap(t *testing.T) {
	tr := busyTrace(2)
	free, err := Run(tr, Options{DefragMoves: 2, MaxEvictions: -1})
	if err != nil {
		t.Fatal(err)
	}
	capped, err := Run(tr, Options{DefragMoves: 2, MaxEvictions: 3, EvictionWindow: 1000 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if free.Moves <= 3 || capped.Moves > 3 || capped.DefragCapped == 0 {
		t.Fatalf("%d moves without the cap, %d under a cap of 3 (%d plans refused)", free.Moves, capped.Moves, capped.DefragCapped)
	}
	// A window of an hour's hundredth at 40 arrivals an hour refuses fewer plans.
	short, err := Run(tr, Options{DefragMoves: 2, MaxEvictions: 3, EvictionWindow: 36 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if short.Moves <= capped.Moves || short.DefragCapped >= capped.DefragCapped {
		t.Errorf("a short window: %d moves, %d refused; the whole trace: %d, %d", short.Moves, short.DefragCapped, capped.Moves, capped.DefragCapped)
	}
}

// A moved pod is gone for RestartTime: the same decisions, less accepted slice-time, the loss
// counted.
func TestRunRestartTime(t *testing.T) {
	tr := busyTrace(2)
	quick, err := Run(tr, Options{DefragMoves: 2, MaxEvictions: -1})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := Run(tr, Options{DefragMoves: 2, MaxEvictions: -1, RestartTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if slow.Moves != quick.Moves || slow.RestartLoss <= 0 || quick.RestartLoss != 0 {
		t.Fatalf("moves %d and %d, restart loss %v and %v", quick.Moves, slow.Moves, quick.RestartLoss, slow.RestartLoss)
	}
	if d := quick.Acceptance - slow.Acceptance - slow.RestartLoss; d > 2e-4 || d < -2e-4 {
		t.Errorf("acceptance %v without restarts, %v with, loss %v", quick.Acceptance, slow.Acceptance, slow.RestartLoss)
	}
}
