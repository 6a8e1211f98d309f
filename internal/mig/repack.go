package mig

import "fmt"

// PackExact decides whether the items fit on gpus GPUs of model m, whatever their sizes, and
// when they do returns one legal state per GPU used (fewer than gpus when fewer suffice). It is
// Optimum's search (bound.go) asked a yes-or-no question, so it has no limit on the number of
// slices: a GPU holds the largest profile still wanted within a maximal configuration, the lower
// bound cuts every branch that cannot fit in the GPUs left, and the sub-problems known not to
// fit in k GPUs are remembered. work bounds the branches tried; exhausted says the search ran
// out of it before an answer (fits is then false and says nothing).
func PackExact(m Model, items []RequestItem, gpus, work int) (states []GPUState, fits, exhausted bool, err error) {
	t, layout, answer, err := packCounts(m, items, gpus, work)
	if err != nil || answer != packYes {
		return nil, false, answer == packOutOfWork, err
	}
	byCounts := t.statesByCounts()
	for _, c := range layout {
		sts, ok := byCounts[c]
		if !ok {
			return nil, false, false, fmt.Errorf("no legal %s state holds %v", m, c) // a sub-multiset of a legal state always is one
		}
		states = append(states, GPUState{model: m, idx: uint16(sts[0])})
	}
	return states, true, false, nil
}

// packCounts is PackExact's search: on packYes, the counts per profile of each GPU used.
func packCounts(m Model, items []RequestItem, gpus, work int) (*modelTable, [][maxProfiles]uint8, packAnswer, error) {
	t, d, _, err := demand(m, items)
	if err != nil {
		return nil, nil, packNo, err
	}
	var v [maxProfiles]uint8
	for p := range t.profiles {
		if d[p] > 255 {
			return nil, nil, packNo, fmt.Errorf("%d slices of %s: PackExact counts at most 255 per profile", d[p], t.profiles[p].Name)
		}
		v[p] = uint8(d[p])
	}
	s := &packSearch{optSearch: optSearch{t: t, b: t.bounds()}, work: work, noFit: map[[maxProfiles]uint8]int{}}
	answer := s.fit(v, gpus)
	return t, s.chosen, answer, nil
}

type packAnswer int8

const (
	packNo packAnswer = iota
	packYes
	packOutOfWork
)

type packSearch struct {
	optSearch
	work  int
	noFit map[[maxProfiles]uint8]int // remaining demand -> most GPUs known too few
	// chosen holds, on success, each GPU's counts per profile (the path of the search).
	chosen [][maxProfiles]uint8
}

func (s *packSearch) fit(v [maxProfiles]uint8, k int) packAnswer {
	np := s.t.nprof()
	first := s.largestWanted(v)
	if first < 0 {
		return packYes
	}
	if s.work <= 0 {
		return packOutOfWork
	}
	s.work--
	var d [maxProfiles]int
	for p := 0; p < np; p++ {
		d[p] = int(v[p])
	}
	if k <= 0 || s.t.lowerBound(d) > k {
		return packNo
	}
	if most, ok := s.noFit[v]; ok && most >= k {
		return packNo
	}
	tried := map[[maxProfiles]uint8]bool{}
	for _, c := range s.b.configs {
		if c[first] == 0 {
			continue
		}
		var r, took [maxProfiles]uint8
		for p := 0; p < np; p++ {
			took[p] = min(v[p], c[p])
			r[p] = v[p] - took[p]
		}
		if tried[r] {
			continue
		}
		tried[r] = true
		s.chosen = append(s.chosen, took)
		switch s.fit(r, k-1) {
		case packYes:
			return packYes
		case packOutOfWork:
			return packOutOfWork
		}
		s.chosen = s.chosen[:len(s.chosen)-1]
	}
	s.noFit[v] = max(s.noFit[v], k)
	return packNo
}

// statesByCounts maps each count vector a legal state has to every such state, in enumeration
// order.
func (t *modelTable) statesByCounts() map[[maxProfiles]uint8][]int {
	t.countsOnce.Do(func() {
		t.byCounts = map[[maxProfiles]uint8][]int{}
		for st := range t.states {
			c := t.counts(st)
			t.byCounts[c] = append(t.byCounts[c], st)
		}
	})
	return t.byCounts
}
