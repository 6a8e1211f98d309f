package mig

import (
	"fmt"
	"math/bits"
)

// MaxExactRequests is the largest static instance Optimum accepts.
const MaxExactRequests = 40

// boundTable holds what LowerBound and Optimum derive from a model's state table.
type boundTable struct {
	full     [maxProfiles]bool // the profile takes the whole GPU
	weights  [][maxProfiles]int64
	capacity []int64
	configs  [][maxProfiles]uint8 // maximal per-GPU count vectors
}

func (t *modelTable) bounds() *boundTable {
	t.boundOnce.Do(func() { t.bound = t.buildBounds() })
	return t.bound
}

func (t *modelTable) counts(st int) [maxProfiles]uint8 {
	var c [maxProfiles]uint8
	for p := range t.profiles {
		c[p] = uint8(bits.OnesCount32(t.states[st] & t.profMask[p]))
	}
	return c
}

func (t *modelTable) buildBounds() *boundTable {
	b := &boundTable{}
	np := t.nprof()
	for p, ps := range t.spec.profiles {
		b.full[p] = ps.compute == t.spec.computeSlices && ps.memory == t.spec.memorySlices
	}
	// Weight families: compute slices, memory slices, media engines, and for every profile q
	// the fewest legal starts of q that one instance of p blocks. Each family's capacity is the
	// most any legal GPU state holds, so every family is a valid bound.
	var fams [][maxProfiles]int64
	var w [maxProfiles]int64
	for p, ps := range t.spec.profiles {
		w[p] = int64(ps.compute)
	}
	fams = append(fams, w)
	for p, ps := range t.spec.profiles {
		w[p] = int64(ps.memory)
	}
	fams = append(fams, w)
	for p, ps := range t.spec.profiles {
		w[p] = 0
		if ps.media() {
			w[p] = 1
		}
	}
	fams = append(fams, w)
	for q := range t.profiles {
		for p := range t.profiles {
			least := int64(-1)
			for _, start := range t.profiles[p].Starts {
				mem := t.slots[t.slotOf[p][start]].mem
				n := int64(0)
				for _, qs := range t.profiles[q].Starts {
					if t.slots[t.slotOf[q][qs]].mem&mem != 0 {
						n++
					}
				}
				if least < 0 || n < least {
					least = n
				}
			}
			w[p] = least
		}
		fams = append(fams, w)
	}
	for _, f := range fams {
		for p := 0; p < np; p++ {
			if b.full[p] {
				f[p] = 0
			}
		}
		var capacity int64
		for st := range t.states {
			c := t.counts(st)
			var sum int64
			for p := 0; p < np; p++ {
				sum += f[p] * int64(c[p])
			}
			capacity = max(capacity, sum)
		}
		if capacity > 0 {
			b.weights = append(b.weights, f)
			b.capacity = append(b.capacity, capacity)
		}
	}
	// Maximal configurations: count vectors no other state's vector dominates.
	seen := map[[maxProfiles]uint8]bool{}
	var all [][maxProfiles]uint8
	for st := range t.states {
		c := t.counts(st)
		if !seen[c] {
			seen[c] = true
			all = append(all, c)
		}
	}
	for i, c := range all {
		dominated := false
		for j, d := range all {
			if i != j && dominates(d, c, np) {
				dominated = true
				break
			}
		}
		if !dominated {
			b.configs = append(b.configs, c)
		}
	}
	return b
}

func dominates(d, c [maxProfiles]uint8, np int) bool {
	strict := false
	for p := 0; p < np; p++ {
		if d[p] < c[p] {
			return false
		}
		if d[p] > c[p] {
			strict = true
		}
	}
	return strict
}

// demand turns items into a count vector of the model's profiles.
func demand(m Model, items []RequestItem) (*modelTable, [maxProfiles]int, int, error) {
	var d [maxProfiles]int
	t := tableFor(m)
	if t == nil {
		return nil, d, 0, fmt.Errorf("unknown GPU model %d", int(m))
	}
	n := 0
	for _, it := range items {
		p, err := m.Profile(it.Profile)
		if err != nil {
			return nil, d, 0, err
		}
		if it.Count < 0 {
			return nil, d, 0, fmt.Errorf("negative count %d for %s", it.Count, it.Profile)
		}
		d[p.index] += it.Count
		n += it.Count
	}
	return t, d, n, nil
}

// LowerBound is a lower bound on the number of GPUs of model m that can hold the items. It is
// at least the bound of docs/design/geometry.md: whole-GPU profiles each take a GPU, and for the rest the best
// of the weighted bounds (compute, memory, media engines, and the legal starts each profile
// blocks of each other profile), each weight family capped by the most a legal GPU state holds.
func LowerBound(m Model, items []RequestItem) (int, error) {
	t, d, _, err := demand(m, items)
	if err != nil {
		return 0, err
	}
	return t.lowerBound(d), nil
}

func (t *modelTable) lowerBound(d [maxProfiles]int) int {
	b := t.bounds()
	full, rest := 0, 0
	for p := range t.profiles {
		if b.full[p] {
			full += d[p]
		}
	}
	for i, w := range b.weights {
		var sum int64
		for p := range t.profiles {
			sum += w[p] * int64(d[p])
		}
		rest = max(rest, int((sum+b.capacity[i]-1)/b.capacity[i]))
	}
	return full + rest
}

// Optimum is the exact minimum number of GPUs of model m that can hold the items (a static
// batch of at most MaxExactRequests slices).
func Optimum(m Model, items []RequestItem) (int, error) {
	t, d, n, err := demand(m, items)
	if err != nil {
		return 0, err
	}
	if n > MaxExactRequests {
		return 0, fmt.Errorf("%d slices: the exact optimum is limited to %d", n, MaxExactRequests)
	}
	s := &optSearch{t: t, b: t.bounds(), memo: map[[maxProfiles]uint8]int{}}
	var v [maxProfiles]uint8
	for p := range t.profiles {
		v[p] = uint8(d[p])
	}
	return s.solve(v), nil
}

type optSearch struct {
	t    *modelTable
	b    *boundTable
	memo map[[maxProfiles]uint8]int
}

// solve returns the fewest GPUs covering v. Some GPU must hold an instance of the largest
// profile still wanted; its contents are dominated by a maximal configuration containing it.
func (s *optSearch) solve(v [maxProfiles]uint8) int {
	if r, ok := s.memo[v]; ok {
		return r
	}
	np := s.t.nprof()
	first := s.largestWanted(v)
	if first < 0 {
		return 0
	}
	var d [maxProfiles]int
	for p := 0; p < np; p++ {
		d[p] = int(v[p])
	}
	lb := s.t.lowerBound(d)
	best := 1 << 30
	tried := map[[maxProfiles]uint8]bool{}
	for _, c := range s.b.configs {
		if c[first] == 0 {
			continue
		}
		var r [maxProfiles]uint8
		for p := 0; p < np; p++ {
			if v[p] > c[p] {
				r[p] = v[p] - c[p]
			}
		}
		if tried[r] {
			continue
		}
		tried[r] = true
		best = min(best, 1+s.solve(r))
		if best == lb {
			break
		}
	}
	s.memo[v] = best
	return best
}

// largestWanted is the largest profile v still wants (compute, then memory slices), -1 when
// none.
func (s *optSearch) largestWanted(v [maxProfiles]uint8) int {
	first := -1
	for p := 0; p < s.t.nprof(); p++ {
		if v[p] > 0 && (first < 0 || s.bigger(p, first)) {
			first = p
		}
	}
	return first
}

func (s *optSearch) bigger(p, q int) bool {
	a, b := &s.t.spec.profiles[p], &s.t.spec.profiles[q]
	if a.compute != b.compute {
		return a.compute > b.compute
	}
	return a.memory > b.memory
}
