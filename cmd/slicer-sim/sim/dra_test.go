package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/slicer-operator/slicer/internal/mig"
)

// busyTrace offers more than two nodes of 8 H100s can hold, so placement order matters.
func busyTrace(seed uint64) *Trace {
	rng := rand.New(rand.NewPCG(seed, 3))
	profiles := []string{"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	tr := &Trace{Cluster: Cluster{Nodes: 2, GPUsPerNode: 8, Model: "H100-80GB"}}
	t := 0.0
	for i := range 600 {
		t += rng.ExpFloat64() / 40
		id := fmt.Sprintf("p%d", i)
		tr.Events = append(tr.Events, Event{T: t, Arrive: id, Profile: profiles[rng.IntN(len(profiles))], Controller: "ReplicaSet"},
			Event{T: t + rng.ExpFloat64(), Depart: id})
	}
	SortEvents(tr.Events)
	return tr
}

// Stock DRA replays keep every GPU legal (Apply refuses overlaps), name order never
// republishes, Slicer's order does, the same seed gives the same decisions, and the decisions
// follow the published order.
func TestStockDRA(t *testing.T) {
	tr := busyTrace(1)
	run := func(order mig.DeviceOrder) (*Result, []Decision) {
		var buf bytes.Buffer
		res, err := Run(tr, Options{Frontend: StockDRA, Order: order, Seed: 9, Decisions: &buf})
		if err != nil {
			t.Fatal(err)
		}
		var ds []Decision
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var d Decision
			if err := dec.Decode(&d); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, d)
		}
		return res, ds
	}
	name, nameDecisions := run(mig.NameOrder)
	pref, _ := run(mig.PreferredOrder)
	again, _ := run(mig.PreferredOrder)
	if name.Policy != "dra-stock/name-order" || pref.Policy != "dra-stock/slicer-order" {
		t.Fatalf("policies %q, %q", name.Policy, pref.Policy)
	}
	if name.Accepted == 0 || name.Accepted == name.Requests {
		t.Fatalf("the trace should overload the cluster: %d of %d accepted", name.Accepted, name.Requests)
	}
	if name.SliceWritesPerEvent != 0 || pref.SliceWritesPerEvent == 0 {
		t.Fatalf("republishes per event: name order %v (want 0), Slicer order %v (want > 0)", name.SliceWritesPerEvent, pref.SliceWritesPerEvent)
	}
	pref.DecisionP50, pref.DecisionP99, again.DecisionP50, again.DecisionP99 = 0, 0, 0, 0
	if *pref != *again {
		t.Fatalf("same seed, different results: %+v vs %+v", pref, again)
	}
	// Name order: the first arrival, on an empty cluster, goes to GPU 0 at start 0.
	if d := nameDecisions[0]; !d.Accepted || *d.GPU != 0 || *d.Start != 0 {
		t.Fatalf("first arrival in name order: %+v, want GPU 0 start 0", d)
	}
}
