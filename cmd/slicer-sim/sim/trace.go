// Package sim replays a MIG request trace through a placement policy of internal/mig, using
// exactly the functions the scheduler plugin uses (Policy.Score through migsim.SelectNode, then
// Policy.Place and mig.Apply).
package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// Cluster is the first line of a trace.
type Cluster struct {
	Nodes       int    `json:"nodes"`
	GPUsPerNode int    `json:"gpusPerNode"`
	Model       string `json:"model"`
}

// Event is one arrival or departure. An arrival's pod may be moved by defragmentation only
// when Controller names its controlling owner's kind (ReplicaSet, Job, ...; "" for a bare pod,
// which is never moved) and Unmovable (slicer.dev/movable: "false") is not set: the scheduler's
// rules (mig.PodMove).
type Event struct {
	T          float64 `json:"t"`
	Arrive     string  `json:"arrive,omitempty"`
	Profile    string  `json:"profile,omitempty"`
	Controller string  `json:"controller,omitempty"`
	Unmovable  bool    `json:"unmovable,omitempty"`
	Depart     string  `json:"depart,omitempty"`
}

// Trace is a parsed trace.
type Trace struct {
	Cluster Cluster
	Events  []Event
}

type header struct {
	Cluster *Cluster `json:"cluster"`
}

// ReadTrace parses JSON Lines: a cluster line, then events ordered by time.
func ReadTrace(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	tr := &Trace{}
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		if tr.Cluster.Nodes == 0 && len(tr.Events) == 0 && line == 1 {
			var h header
			if err := json.Unmarshal(b, &h); err != nil || h.Cluster == nil {
				return nil, fmt.Errorf("line 1: want {\"cluster\":{...}}: %w", err)
			}
			tr.Cluster = *h.Cluster
			continue
		}
		var ev Event
		if err := json.Unmarshal(b, &ev); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if (ev.Arrive == "") == (ev.Depart == "") {
			return nil, fmt.Errorf("line %d: an event has exactly one of arrive or depart", line)
		}
		if ev.Arrive != "" && ev.Profile == "" {
			return nil, fmt.Errorf("line %d: arrival %q has no profile", line, ev.Arrive)
		}
		if n := len(tr.Events); n > 0 && ev.T < tr.Events[n-1].T {
			return nil, fmt.Errorf("line %d: event at t=%g before t=%g", line, ev.T, tr.Events[n-1].T)
		}
		tr.Events = append(tr.Events, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if line == 0 {
		return nil, fmt.Errorf("empty trace")
	}
	if tr.Cluster.GPUsPerNode <= 0 || tr.Cluster.Nodes < 0 {
		return nil, fmt.Errorf("cluster needs nodes >= 0 and gpusPerNode > 0")
	}
	return tr, nil
}

// WriteTrace writes a trace as JSON Lines.
func WriteTrace(w io.Writer, tr *Trace) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(header{Cluster: &tr.Cluster}); err != nil {
		return err
	}
	for _, ev := range tr.Events {
		if err := enc.Encode(ev); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// SortEvents orders events by time; at equal times departures come first.
func SortEvents(evs []Event) {
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].T != evs[j].T {
			return evs[i].T < evs[j].T
		}
		return evs[i].Depart != "" && evs[j].Depart == ""
	})
}
