package mig

import "testing"

// h100Node is a node of H100 GPUs: whole free ones, switchable empty MIG ones, and MIG GPUs
// each holding one 1g.10gb slice.
func h100Node(t *testing.T, whole, migEmpty, sliced int) Node {
	t.Helper()
	var gpus []GPU
	for range whole {
		gpus = append(gpus, GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeWhole, Switchable: true})
	}
	for range migEmpty + sliced {
		gpus = append(gpus, GPU{State: EmptyGPU(H100_80GB), Usable: true, Mode: ModeMIG, Switchable: true})
	}
	node := Node{GPUs: gpus}
	for g := whole + migEmpty; g < len(gpus); g++ {
		st, err := node.GPUs[g].State.Take(stateProfile(H100_80GB, "1g.10gb"), Placement{Start: 0, Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		node.GPUs[g].State = st
	}
	return node
}

// A 1-GPU pod switches the last empty MIG GPU of a node full of slices rather than break an
// empty whole node that an 8-GPU pod could take (the GPUs left whole outweigh the switch).
func TestScoreWholeKeepsEmptyNodesWhole(t *testing.T) {
	sliced, _ := ScoreWhole(h100Node(t, 0, 1, 7), 1)
	empty, _ := ScoreWhole(h100Node(t, 8, 0, 0), 1)
	if sliced <= empty {
		t.Errorf("switching on a sliced node scores %d <= %d on an empty whole node", sliced, empty)
	}
	// Two nodes that need no switch: the one left with fewer free GPUs.
	a, _ := ScoreWhole(h100Node(t, 2, 0, 6), 1)
	if b, _ := ScoreWhole(h100Node(t, 8, 0, 0), 1); a <= b {
		t.Errorf("a node left with 1 free GPU scores %d <= %d with 7", a, b)
	}
}

// A slice that must take an empty GPU takes it on the node with the fewest GPUs free for whole
// use; one that fits a GPU in use loses nothing; a node whose GPUs cannot switch (a MIG-only
// node, every slice-only trace) scores as the placeability policy alone says.
func TestSliceBreaksTheNodeWithFewestWholeGPUs(t *testing.T) {
	req := MustRequest(RequestItem{Profile: "4g.40gb", Count: 1}) // only at start 0: never beside the 1g.10gb
	score := func(node Node) int64 {
		s, ok := Score(node, req)
		if !ok {
			t.Fatalf("4g.40gb does not fit %+v", node)
		}
		return s
	}
	emptyNode := h100Node(t, 0, 8, 0)
	busyNode := h100Node(t, 0, 1, 7)
	if a, b := score(busyNode), score(emptyNode); a <= b {
		t.Errorf("breaking the last empty GPU of a sliced node scores %d <= %d on an empty node", a, b)
	}
	fixed := h100Node(t, 0, 8, 0)
	for g := range fixed.GPUs {
		fixed.GPUs[g].Switchable = false
	}
	if a, b := score(fixed), score(busyNode); a <= b {
		t.Errorf("a node without GPUs free for whole use scores %d <= %d", a, b)
	}
	small := MustRequest(RequestItem{Profile: "1g.10gb", Count: 1})
	onSliced, _ := Score(h100Node(t, 0, 7, 1), small)
	fixedSliced := h100Node(t, 0, 7, 1)
	for g := range fixedSliced.GPUs {
		fixedSliced.GPUs[g].Switchable = false
	}
	if want, _ := Score(fixedSliced, small); onSliced != want {
		t.Errorf("a slice on a GPU in use scores %d, %d on the same node that cannot switch", onSliced, want)
	}
}
