package mig

import (
	"math/rand/v2"
	"testing"
)

// The scheduler reuses an answer without a plan while the cluster only takes room
// (scheduler/plugin/defrag_memo.go): instances added, GPUs lost, movability and destinations
// unchanged for the slices already there. That is sound only if taking room never makes a plan
// appear: a plan on the fuller cluster, less its moves of the added slices, is a plan of no
// more moves on the emptier one. This checks it on random clusters with and without
// destination restrictions: an exhaustive NoPlan stays without a plan, NoCapacity stays
// NoCapacity.
func TestPlanDefragRoomTakenMakesNoPlan(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	const maxMoves = 2
	checked := map[DefragOutcome]int{}
	for c := 0; c < 3000; c++ {
		models := caseModels(c)
		nn := 1 + rng.IntN(3)
		nodes, movable := randomCluster(rng, models, nn, 1+rng.IntN(3), 0.8)
		opts := DefragOptions{MaxMoves: maxMoves}
		if c%2 == 1 {
			allowed := map[sliceKey][]int{}
			for _, k := range sortedSliceKeys(movable) {
				if rng.IntN(2) == 0 {
					allowed[k] = []int{rng.IntN(nn)}
				}
			}
			opts.Destinations = destMap(allowed, nil)
		}
		m := models[rng.IntN(len(models))]
		profs := m.Profiles()
		req := MustRequest(RequestItem{Profile: profs[rng.IntN(len(profs))].Name, Count: 1})
		before := PlanDefrag(nodes, req, movableSet(movable), opts)
		if before.Bounded || (before.Outcome != DefragNoPlan && before.Outcome != DefragNoCapacity) {
			continue
		}

		// Take room: add instances at free placements (each movable or not), lose a GPU.
		fuller := make([]Node, len(nodes))
		for n := range nodes {
			fuller[n].GPUs = append([]GPU(nil), nodes[n].GPUs...)
		}
		moreMovable := map[sliceKey]bool{}
		for k, v := range movable {
			moreMovable[k] = v
		}
		for i := 1 + rng.IntN(3); i > 0; i-- {
			n := rng.IntN(nn)
			g := rng.IntN(len(fuller[n].GPUs))
			st := fuller[n].GPUs[g].State
			ps := st.Model().Profiles()
			p := ps[rng.IntN(len(ps))]
			cands := st.Candidates(p)
			if len(cands) == 0 {
				continue
			}
			pl := cands[rng.IntN(len(cands))]
			next, err := st.Take(p, pl)
			if err != nil {
				t.Fatal(err)
			}
			fuller[n].GPUs[g].State = next
			if rng.IntN(2) == 0 {
				moreMovable[sliceKey{n, g, pl.Start}] = true
			}
		}
		if rng.IntN(4) == 0 {
			n := rng.IntN(nn)
			fuller[n].GPUs[rng.IntN(len(fuller[n].GPUs))].Usable = false
		}
		after := PlanDefrag(fuller, req, movableSet(moreMovable), opts)
		checked[before.Outcome]++
		switch {
		case after.Outcome == DefragPlanned || after.Outcome == DefragFitsNow:
			t.Fatalf("case %d (%s): %s before room was taken, %s after:\nbefore %v\nafter %v", c, req.Slices()[0],
				before.Outcome, after.Outcome, nodes, fuller)
		case before.Outcome == DefragNoCapacity && after.Outcome != DefragNoCapacity:
			t.Fatalf("case %d (%s): NoCapacity before room was taken, %s after", c, req.Slices()[0], after.Outcome)
		}
	}
	t.Logf("answers checked after room was taken: %v", checked)
	if checked[DefragNoPlan] < 100 || checked[DefragNoCapacity] < 100 {
		t.Errorf("too few cases of each answer: %v", checked)
	}
}
