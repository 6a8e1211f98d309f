package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Traces that mix whole-GPU pods (nvidia.com/gpu: N, N GPUs of one node) with MIG slices, for
// measuring one pool of switchable GPUs against a cluster split into MIG nodes and whole-GPU
// nodes (issue 40; docs/benchmarks.md, "Whole GPUs and slices from one pool").

// MixedEvent is one arrival or departure of a mixed trace: an arrival is a slice (Profile) or a
// whole-GPU pod (GPUs > 0), never both.
type MixedEvent struct {
	T       float64 `json:"t"`
	Arrive  string  `json:"arrive,omitempty"`
	Profile string  `json:"profile,omitempty"`
	GPUs    int     `json:"gpus,omitempty"`
	Depart  string  `json:"depart,omitempty"`
}

// Whole reports whether the event is a whole-GPU pod's arrival.
func (e MixedEvent) Whole() bool { return e.Arrive != "" && e.GPUs > 0 }

// MixedTrace is a mixed trace: every GPU of the cluster is of Cluster.Model.
type MixedTrace struct {
	Cluster Cluster
	Events  []MixedEvent
}

// SliceShare is one slice profile's share of the slice arrivals.
type SliceShare struct {
	Profile string
	Share   float64
}

// WholeShare is one whole-GPU pod size's share of the whole-GPU arrivals.
type WholeShare struct {
	GPUs  int
	Share float64
}

// MixedSpec describes a generated mixed trace. Arrivals are Poisson, durations log-normal (σ
// 1) with the class's mean. The trace runs in phases of Phase arrivals; phase k's whole-GPU
// share of the offered compute is Shares[k mod len(Shares)], and its arrival rate makes the
// offered compute Load × the cluster's compute in every phase. A whole GPU offers the model's
// compute slices (a whole H100 counts as 7, as a 7g.80gb does).
type MixedSpec struct {
	Cluster  Cluster
	Load     float64
	Arrivals int
	Slices   []SliceShare
	Whole    []WholeShare
	// SliceLifetime and WholeLifetime are the mean durations, in trace time units.
	SliceLifetime, WholeLifetime float64
	Shares                       []float64
	// Phase is the arrivals per phase; 0 is one phase (a steady mix, Shares[0]).
	Phase int
	Seed  uint64
}

// mixedClass is what one class of arrivals offers on average.
type mixedClass struct {
	cum   []float64 // cumulative shares, ending at 1
	work  float64   // mean compute slices × mean lifetime of one arrival
	names []string  // slices: profiles
	gpus  []int     // whole: pod sizes
}

// GenerateMixed builds the trace spec describes, deterministic from spec.Seed.
func GenerateMixed(spec MixedSpec) (*MixedTrace, error) {
	m, err := mig.ParseModel(spec.Cluster.Model)
	if err != nil {
		return nil, err
	}
	switch {
	case spec.Cluster.Nodes <= 0 || spec.Cluster.GPUsPerNode <= 0:
		return nil, fmt.Errorf("a mixed trace needs nodes and GPUs per node")
	case spec.Load <= 0 || spec.Arrivals < 0 || spec.Phase < 0:
		return nil, fmt.Errorf("load must be positive, arrivals and phase at least 0")
	case spec.SliceLifetime <= 0 || spec.WholeLifetime <= 0:
		return nil, fmt.Errorf("lifetimes must be positive")
	case len(spec.Shares) == 0:
		return nil, fmt.Errorf("no whole-GPU share")
	}
	slices := mixedClass{}
	total := 0.0
	for _, s := range spec.Slices {
		p, err := m.Profile(s.Profile)
		if err != nil {
			return nil, err
		}
		if s.Share < 0 {
			return nil, fmt.Errorf("profile %s: negative share", s.Profile)
		}
		total += s.Share
		slices.names = append(slices.names, p.Name)
		slices.cum = append(slices.cum, total)
		slices.work += s.Share * float64(p.ComputeSlices)
	}
	whole := mixedClass{}
	wtotal := 0.0
	for _, w := range spec.Whole {
		if w.GPUs <= 0 || w.GPUs > spec.Cluster.GPUsPerNode || w.GPUs > mig.MaxWholeGPUs {
			return nil, fmt.Errorf("a whole-GPU pod of %d GPUs on nodes of %d", w.GPUs, spec.Cluster.GPUsPerNode)
		}
		if w.Share < 0 {
			return nil, fmt.Errorf("pods of %d GPUs: negative share", w.GPUs)
		}
		wtotal += w.Share
		whole.gpus = append(whole.gpus, w.GPUs)
		whole.cum = append(whole.cum, wtotal)
		whole.work += w.Share * float64(w.GPUs*m.ComputeSlices())
	}
	if total <= 0 || wtotal <= 0 {
		return nil, fmt.Errorf("a mixed trace needs slices and whole-GPU pods")
	}
	for i := range slices.cum {
		slices.cum[i] /= total
	}
	for i := range whole.cum {
		whole.cum[i] /= wtotal
	}
	slices.work *= spec.SliceLifetime / total
	whole.work *= spec.WholeLifetime / wtotal
	for _, s := range spec.Shares {
		if s < 0 || s >= 1 {
			return nil, fmt.Errorf("whole-GPU share %g is outside [0, 1)", s)
		}
	}

	rng := rand.New(rand.NewPCG(spec.Seed, 0x3a01e))
	const sigma = 1.0
	mu := -sigma * sigma / 2 // a log-normal of mean 1
	capacity := float64(spec.Cluster.Nodes * spec.Cluster.GPUsPerNode * m.ComputeSlices())
	tr := &MixedTrace{Cluster: spec.Cluster}
	t := 0.0
	for i := 0; i < spec.Arrivals; i++ {
		share := spec.Shares[0]
		if spec.Phase > 0 {
			share = spec.Shares[(i/spec.Phase)%len(spec.Shares)]
		}
		// The probability that an arrival is whole so that whole pods offer share of the
		// phase's compute, and the rate that makes the offered compute load × capacity.
		pw := share * slices.work / (share*slices.work + (1-share)*whole.work)
		rate := spec.Load * capacity / (pw*whole.work + (1-pw)*slices.work)
		t += rng.ExpFloat64() / rate
		id := fmt.Sprintf("p%d", i)
		ev := MixedEvent{T: round6(t), Arrive: id}
		life := spec.SliceLifetime
		if rng.Float64() < pw {
			ev.GPUs, life = whole.gpus[pickCum(rng, whole.cum)], spec.WholeLifetime
		} else {
			ev.Profile = slices.names[pickCum(rng, slices.cum)]
		}
		d := life * math.Exp(mu+sigma*rng.NormFloat64())
		tr.Events = append(tr.Events, ev, MixedEvent{T: round6(t + d), Depart: id})
	}
	sortMixed(tr.Events)
	return tr, nil
}

// pickCum draws an index from cumulative shares ending at 1.
func pickCum(rng *rand.Rand, cum []float64) int {
	u := rng.Float64()
	for i, c := range cum {
		if u < c {
			return i
		}
	}
	return len(cum) - 1
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

// sortMixed orders events by time; at equal times departures come first (SortEvents' rule).
func sortMixed(evs []MixedEvent) {
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].T != evs[j].T {
			return evs[i].T < evs[j].T
		}
		return evs[i].Depart != "" && evs[j].Depart == ""
	})
}
