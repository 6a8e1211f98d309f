package migsim

import (
	"fmt"
	"sort"

	"github.com/slicer-operator/slicer/internal/mig"
)

// PackStatic places a static batch with a policy, one slice at a time, on as many empty GPUs
// of model m as there are slices, and returns how many GPUs it used. The batch is known up
// front, so it is fed to the policy in the order StaticOrder gives (the same for every policy).
func PackStatic(pol Policy, m mig.Model, items []mig.RequestItem) (int, error) {
	order, err := StaticOrder(m, items)
	if err != nil {
		return 0, err
	}
	node := mig.Node{GPUs: make([]mig.GPU, len(order))}
	for i := range node.GPUs {
		node.GPUs[i] = mig.GPU{State: mig.EmptyGPU(m), Usable: true}
	}
	for _, name := range order {
		req, err := mig.NewRequest(mig.RequestItem{Profile: name, Count: 1})
		if err != nil {
			return 0, err
		}
		as, err := pol.Place(node, req)
		if err != nil {
			return 0, err
		}
		if err := mig.Apply(node, as); err != nil {
			return 0, err
		}
	}
	used := 0
	for _, g := range node.GPUs {
		if !g.State.IsEmpty() {
			used++
		}
	}
	return used, nil
}

// StaticOrder is the order in which PackStatic places a static batch, one profile name per
// slice:
//
//  1. +me slices (each needs a GPU of its own media engines);
//  2. the rest largest first (compute, then memory slices) up to the half-GPU profiles: whole
//     GPUs and the halves with a single start (7g, then 4g on 8-slice GPUs);
//  3. the half-GPU profiles with two starts (3g on 8-slice GPUs): the first ones pair with the
//     single-start halves of step 2; each later one is followed by the small slices that fill
//     the other half of its GPU (first fit decreasing into the free compute and memory, skipping
//     slices that use memory faster than compute, such as 1g.20gb), so the policy completes that
//     GPU before the next half arrives instead of pairing two halves and stranding a compute
//     slice;
//  4. the small slices left, largest first.
func StaticOrder(m mig.Model, items []mig.RequestItem) ([]string, error) {
	if !m.Valid() {
		return nil, fmt.Errorf("unknown GPU model %d", int(m))
	}
	profs := m.Profiles()
	counts := map[string]int{}
	for _, it := range items {
		p, err := m.Profile(it.Profile)
		if err != nil {
			return nil, err
		}
		if it.Count < 0 {
			return nil, fmt.Errorf("negative count %d for %s", it.Count, it.Profile)
		}
		counts[p.Name] += it.Count
	}
	var order []mig.Profile
	for _, p := range profs {
		for i := 0; i < counts[p.Name]; i++ {
			order = append(order, p)
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.MediaExtensions != b.MediaExtensions {
			return a.MediaExtensions
		}
		if a.ComputeSlices != b.ComputeSlices {
			return a.ComputeSlices > b.ComputeSlices
		}
		return a.MemorySlices > b.MemorySlices
	})
	half := m.MemorySlices() / 2
	var out, halves, small []mig.Profile
	pairs := 0
	for _, p := range order {
		switch {
		case p.MediaExtensions, p.MemorySlices > half:
			out = append(out, p)
		case p.MemorySlices == half && len(p.Starts) == 1:
			out = append(out, p)
			pairs++
		case p.MemorySlices == half:
			halves = append(halves, p)
		default:
			small = append(small, p)
		}
	}
	used := make([]bool, len(small))
	for i, h := range halves {
		out = append(out, h)
		if i < pairs {
			continue
		}
		comp, mem := m.ComputeSlices()-h.ComputeSlices, half
		for j, p := range small {
			// A small slice that uses memory faster than compute would strand a compute slice.
			if !used[j] && p.ComputeSlices <= comp && p.MemorySlices <= mem && mem-p.MemorySlices >= comp-p.ComputeSlices {
				used[j] = true
				comp -= p.ComputeSlices
				mem -= p.MemorySlices
				out = append(out, p)
			}
		}
	}
	for j, p := range small {
		if !used[j] {
			out = append(out, p)
		}
	}
	names := make([]string, len(out))
	for i, p := range out {
		names[i] = p.Name
	}
	return names, nil
}
