package mig

import (
	"fmt"
	"sort"
)

// MaxRequestSlices is the most MIG slices one request (one pod) may ask for.
const MaxRequestSlices = 16

// RequestItem asks for Count instances of a profile (name in either spelling).
type RequestItem struct {
	Profile string `json:"profile"`
	Count   int    `json:"count"`
}

// Request is what one pod asks for: up to MaxRequestSlices slices, all on one node. Build it
// once (e.g. in PreFilter) with NewRequest; Score and Place read it without allocating.
type Request struct {
	n     int
	names [MaxRequestSlices]string // NVIDIA spelling, largest first
	// prof[model][i] is the profile index of slice i on that model, -1 when unsupported.
	prof [numModels + 1][MaxRequestSlices]int8
}

// NewRequest validates the items and orders the slices largest first (compute slices, then
// memory), which is the order Place places them in.
func NewRequest(items ...RequestItem) (*Request, error) {
	r := &Request{}
	var names []string
	for _, it := range items {
		name, err := ParseProfileName(it.Profile)
		if err != nil {
			return nil, err
		}
		if it.Count < 0 {
			return nil, fmt.Errorf("negative count %d for %s", it.Count, it.Profile)
		}
		for i := 0; i < it.Count; i++ {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("request asks for no MIG slice")
	}
	if len(names) > MaxRequestSlices {
		return nil, fmt.Errorf("request asks for %d MIG slices, at most %d are supported", len(names), MaxRequestSlices)
	}
	SortSlices(names)
	r.n = len(names)
	copy(r.names[:], names)
	for m := Model(1); m <= numModels; m++ {
		t := tableFor(m)
		for i, name := range names {
			r.prof[m][i] = -1
			for pi, p := range t.profiles {
				if p.Name == name {
					r.prof[m][i] = int8(pi)
				}
			}
		}
	}
	return r, nil
}

// SortSlices orders profile names (NVIDIA spelling) the way Place places them: largest first
// by compute slices, then memory, the scarce +me before its plain twin. It sorts in place and
// returns names.
func SortSlices(names []string) []string {
	sort.SliceStable(names, func(i, j int) bool {
		ci, mi, ei, _ := splitProfileName(names[i])
		cj, mj, ej, _ := splitProfileName(names[j])
		if ci != cj {
			return ci > cj
		}
		if mi != mj {
			return mi > mj
		}
		if ei != ej {
			return ei // the scarce +me first
		}
		return names[i] < names[j]
	})
	return names
}

// MustRequest is NewRequest for tests and tools; it panics on error.
func MustRequest(items ...RequestItem) *Request {
	r, err := NewRequest(items...)
	if err != nil {
		panic(err)
	}
	return r
}

// Len is the number of slices.
func (r *Request) Len() int { return r.n }

// Slices lists the profile names (NVIDIA spelling) of the slices in placement order.
func (r *Request) Slices() []string { return append([]string(nil), r.names[:r.n]...) }

// Profile returns slice i's profile on model m.
func (r *Request) Profile(i int, m Model) (Profile, bool) {
	t := tableFor(m)
	if t == nil || i < 0 || i >= r.n || r.prof[m][i] < 0 {
		return Profile{}, false
	}
	return t.profiles[r.prof[m][i]], true
}
