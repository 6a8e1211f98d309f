package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migsim"
)

// Options change how a trace is replayed.
type Options struct {
	Policy migsim.Policy
	// Elastic adds a node whenever a request fits nowhere (measures consolidation, not loss).
	Elastic bool
	// Decisions, when set, receives one JSON line per arrival.
	Decisions io.Writer
	// Frontend is the device-plugin path (Policy) or the stock scheduler with a DRA driver
	// publishing its devices in Order (Policy unused).
	Frontend Frontend
	Order    mig.DeviceOrder
	// Seed drives the stock scheduler's tie-break among equally scored nodes.
	Seed uint64
	// DefragMoves, when positive, lets a request that fits nowhere be placed after moving up
	// to that many running slices as the scheduler's Evict mode does (defrag.go): the planner
	// (mig.PlanDefrag) asked as the plugin asks it, only the pods the scheduler's rules let move
	// (mig.PodMove: a controller owns them, not annotated slicer.dev/movable: "false"), within
	// the eviction cap, each moved pod gone for RestartTime. Slicer scheduler frontend only, not
	// elastic.
	DefragMoves int
	// DefragChains also allows two-move chains (migsim.PlanDefragChains) when no plan of
	// independent moves exists; with DefragMoves of 2 or more. The scheduler has none.
	DefragChains bool
	// RepackGPUs, when positive (with DefragMoves), also allows repack plans over up to that
	// many GPUs (mig.DefragOptions.RepackGPUs; the scheduler passes mig.DefaultRepackGPUs).
	RepackGPUs int
	// TimeUnit is how long one unit of the trace's time is (0: an hour); the eviction window
	// and the restart time are in real time.
	TimeUnit time.Duration
	// MaxEvictions within EvictionWindow cap the moves, cluster-wide, as
	// spec.defragmentation's maxEvictions and windowSeconds do: a plan that would pass the cap
	// is refused (loss mode: the request is lost). 0: the API's defaults; MaxEvictions < 0: no
	// cap.
	MaxEvictions   int
	EvictionWindow time.Duration
	// RestartTime is how long a moved pod is gone before its replacement runs at the
	// destination (held for it from the move): its slice-time in that span is not accepted.
	RestartTime time.Duration
	// AllMovable lets every running pod move, whatever the trace says of it (the upper bound
	// the simulator measured before it applied the scheduler's rules).
	AllMovable bool
}

// Decision is one arrival's outcome.
type Decision struct {
	ID       string `json:"id"`
	Accepted bool   `json:"accepted"`
	Node     *int   `json:"node,omitempty"`
	GPU      *int   `json:"gpu,omitempty"`
	Start    *int   `json:"start,omitempty"`
	Profile  string `json:"profile"`
	// Moves is how many running slices were moved to place this one, Moved their requests.
	Moves int      `json:"moves,omitempty"`
	Moved []string `json:"moved,omitempty"`
}

// Result is the summary printed as the last line of slicer-sim's output.
type Result struct {
	Policy          string  `json:"policy"`
	Model           string  `json:"model"`
	Elastic         bool    `json:"elastic"`
	Nodes           int     `json:"nodes"`
	GPUs            int     `json:"gpus"`
	Requests        int     `json:"requests"`
	Accepted        int     `json:"accepted"`
	Acceptance      float64 `json:"acceptance"`
	AcceptanceCount float64 `json:"acceptanceCount"`
	MeanGPUsInUse   float64 `json:"meanGPUsInUse"`
	MeanLowerBound  float64 `json:"meanLowerBound"`
	GPUsOverLB      float64 `json:"gpusOverLowerBound"`
	Fragmentation   float64 `json:"fragmentation"`
	DecisionP50     float64 `json:"decisionMicrosP50"`
	DecisionP99     float64 `json:"decisionMicrosP99"`
	// SliceWritesPerEvent is the DRA driver's ResourceSlice republishes per arrival or
	// departure (StockDRA only; zero when the order never changes).
	SliceWritesPerEvent float64 `json:"sliceWritesPerEvent,omitempty"`
	// Moves is how many running slices were moved (DefragMoves only); MovesPerAccepted is
	// Moves per accepted request, and DefragPlans how many arrivals were placed by a plan.
	Moves            int     `json:"moves,omitempty"`
	MovesPerAccepted float64 `json:"movesPerAccepted,omitempty"`
	DefragPlans      int     `json:"defragPlans,omitempty"`
	// DefragNoPlan and DefragNoCapacity count the arrivals that fit nowhere and got no plan:
	// none within the move bound, or too little free compute or memory for any.
	DefragNoPlan     int `json:"defragNoPlan,omitempty"`
	DefragNoCapacity int `json:"defragNoCapacity,omitempty"`
	// Repacks counts the arrivals placed by a repack plan (RepackGPUs only; among DefragPlans,
	// their moves among Moves).
	Repacks int `json:"repacks,omitempty"`
	// DefragCapped counts the arrivals whose plan the eviction cap refused, DefragBounded
	// those whose search a work bound stopped without a plan (a plan it may have missed).
	DefragCapped  int `json:"defragCapped,omitempty"`
	DefragBounded int `json:"defragBounded,omitempty"`
	// RestartLoss is the slice-time moved pods lost while they restarted, as a share of the
	// offered slice-time (already taken off Acceptance).
	RestartLoss float64 `json:"restartLoss,omitempty"`
}

type live struct {
	node    int
	as      []mig.Assignment
	compute int
	profile string
	t       float64
}

// Run replays the trace.
func Run(tr *Trace, opt Options) (*Result, error) {
	model, err := mig.ParseModel(tr.Cluster.Model)
	if err != nil {
		return nil, err
	}
	pol := opt.Policy
	if pol == nil {
		pol = migsim.Slicer
	}
	newNode := func() mig.Node {
		n := mig.Node{GPUs: make([]mig.GPU, tr.Cluster.GPUsPerNode)}
		for i := range n.GPUs {
			n.GPUs[i] = mig.GPU{State: mig.EmptyGPU(model), Usable: true}
		}
		return n
	}
	nodes := make([]mig.Node, tr.Cluster.Nodes)
	for i := range nodes {
		nodes[i] = newNode()
	}
	// Offered work: compute slices × duration; a request without departure lasts to the end.
	end := 0.0
	if n := len(tr.Events); n > 0 {
		end = tr.Events[n-1].T
	}
	arrivals := map[string]Event{}
	duration := map[string]float64{}
	reqs := map[string]*mig.Request{}
	computeOf := map[string]int{}
	mixCount := map[string]int{}
	var mixOrder []string
	for _, ev := range tr.Events {
		if ev.Arrive != "" {
			if _, dup := arrivals[ev.Arrive]; dup {
				return nil, fmt.Errorf("request %q arrives twice", ev.Arrive)
			}
			arrivals[ev.Arrive] = ev
			duration[ev.Arrive] = end - ev.T
			if _, ok := reqs[ev.Profile]; !ok {
				p, err := model.Profile(ev.Profile)
				if err != nil {
					return nil, fmt.Errorf("request %q: %w", ev.Arrive, err)
				}
				r, err := mig.NewRequest(mig.RequestItem{Profile: ev.Profile, Count: 1})
				if err != nil {
					return nil, fmt.Errorf("request %q: %w", ev.Arrive, err)
				}
				reqs[ev.Profile], computeOf[ev.Profile] = r, p.ComputeSlices
				mixOrder = append(mixOrder, ev.Profile)
			}
			mixCount[ev.Profile]++
		} else if a, ok := arrivals[ev.Depart]; ok {
			duration[ev.Depart] = ev.T - a.T
		}
	}
	mix := make([]mixEntry, 0, len(mixOrder))
	total := 0
	for _, name := range mixOrder {
		total += mixCount[name]
	}
	for _, name := range mixOrder {
		p, _ := model.Profile(name)
		mix = append(mix, mixEntry{profile: p, share: float64(mixCount[name]) / float64(max(total, 1))})
	}

	res := &Result{Policy: pol.Name(), Model: model.String(), Elastic: opt.Elastic}
	var dra *draFrontend
	if opt.Frontend == StockDRA {
		dra = newDRAFrontend(opt.Order, opt.Seed)
		res.Policy = dra.name()
	}
	var evict *evictor
	if opt.DefragMoves > 0 {
		if dra != nil || opt.Elastic {
			return nil, fmt.Errorf("moves are modelled only for the Slicer scheduler frontend in loss mode")
		}
		evict = newEvictor(opt)
		res.Policy = fmt.Sprintf("%s + moves ≤%d", res.Policy, opt.DefragMoves)
		if opt.DefragChains {
			res.Policy += " + chains"
		}
		if opt.RepackGPUs > 0 {
			res.Policy += fmt.Sprintf(" + repack ≤%d GPUs", opt.RepackGPUs)
		}
	}
	// where holds the running request of every slice, for moves.
	where := map[sliceKey]string{}
	events := 0
	active := map[string]*live{}
	activeCount := map[string]int{}
	var enc *json.Encoder
	if opt.Decisions != nil {
		enc = json.NewEncoder(opt.Decisions)
	}
	var lat []float64
	var offered, accepted, lost float64
	var integ struct{ gpus, lb, frag, span float64 }
	lastT := math.NaN()
	var curGPUs, curLB, curFrag float64
	for _, e := range tr.Events {
		if !math.IsNaN(lastT) && e.T > lastT {
			dt := e.T - lastT
			integ.gpus += dt * curGPUs
			integ.lb += dt * curLB
			integ.frag += dt * curFrag
			integ.span += dt
		}
		lastT = e.T
		if e.Arrive != "" {
			req := reqs[e.Profile]
			c := computeOf[e.Profile]
			offered += float64(c) * duration[e.Arrive]
			res.Requests++
			t0 := time.Now()
			var as []mig.Assignment
			var idx, moves int
			var movedIDs []string
			if dra != nil {
				idx, as = dra.place(nodes, e.Profile)
				if idx < 0 && opt.Elastic {
					nodes = append(nodes, newNode())
					idx, as = dra.place(nodes, e.Profile)
				}
			} else {
				idx = migsim.SelectNode(pol, nodes, req)
				if idx < 0 && opt.Elastic {
					nodes = append(nodes, newNode())
					idx = len(nodes) - 1
				}
				if idx >= 0 {
					if as, err = pol.Place(nodes[idx], req); err != nil {
						return nil, fmt.Errorf("request %q: Score said node %d fits but Place failed: %w", e.Arrive, idx, err)
					}
				} else if evict != nil {
					var moved []string
					if idx, as, moved, err = evict.place(nodes, req, e.T, where, arrivals, active, res); err != nil {
						return nil, fmt.Errorf("request %q: %w", e.Arrive, err)
					}
					moves, movedIDs = len(moved), moved
					for _, id := range moved {
						l := active[id]
						left := arrivals[id].T + duration[id] - e.T
						lost += float64(l.compute) * min(evict.restart, left)
					}
				}
			}
			// The decision ends here; a DRA driver's republish happens after it.
			decided := time.Since(t0)
			if idx >= 0 && moves == 0 { // a plan has placed the request already
				if err := mig.Apply(nodes[idx], as); err != nil {
					return nil, fmt.Errorf("request %q: %w", e.Arrive, err)
				}
				if dra != nil {
					dra.changed(nodes, idx, +1)
				}
			}
			events++
			lat = append(lat, float64(decided.Nanoseconds())/1e3)
			d := Decision{ID: e.Arrive, Accepted: idx >= 0, Profile: e.Profile}
			if idx >= 0 {
				for _, a := range as {
					where[sliceKey{idx, a.GPU, a.Placement.Start}] = e.Arrive
				}
				if moves > 0 {
					res.Moves += moves
					res.DefragPlans++
					d.Moves, d.Moved = moves, movedIDs
				}
				res.Accepted++
				accepted += float64(c) * duration[e.Arrive]
				active[e.Arrive] = &live{node: idx, as: as, compute: c, profile: e.Profile, t: e.T}
				activeCount[e.Profile]++
				node, gpu, start := idx, as[0].GPU, as[0].Placement.Start
				d.Node, d.GPU, d.Start = &node, &gpu, &start
			}
			if enc != nil {
				if err := enc.Encode(d); err != nil {
					return nil, err
				}
			}
		} else if l, ok := active[e.Depart]; ok {
			for _, a := range l.as {
				delete(where, sliceKey{l.node, a.GPU, a.Placement.Start})
				g := &nodes[l.node].GPUs[a.GPU]
				next, err := g.State.Release(a.Profile, a.Placement)
				if err != nil {
					return nil, fmt.Errorf("depart %q: %w", e.Depart, err)
				}
				g.State = next
			}
			delete(active, e.Depart)
			activeCount[l.profile]--
			events++
			if dra != nil {
				dra.changed(nodes, l.node, -1)
			}
		}
		curGPUs, curFrag = occupancy(nodes, mix)
		items := make([]mig.RequestItem, 0, len(mixOrder))
		for _, name := range mixOrder {
			if n := activeCount[name]; n > 0 {
				items = append(items, mig.RequestItem{Profile: name, Count: n})
			}
		}
		lb, err := mig.LowerBound(model, items)
		if err != nil {
			return nil, err
		}
		curLB = float64(lb)
	}
	res.Nodes = len(nodes)
	res.GPUs = len(nodes) * tr.Cluster.GPUsPerNode
	if offered > 0 {
		res.Acceptance = round4((accepted - lost) / offered)
		res.RestartLoss = round4(lost / offered)
	}
	if res.Requests > 0 {
		res.AcceptanceCount = round4(float64(res.Accepted) / float64(res.Requests))
	}
	if integ.span > 0 {
		res.MeanGPUsInUse = round4(integ.gpus / integ.span)
		res.MeanLowerBound = round4(integ.lb / integ.span)
		res.Fragmentation = round4(integ.frag / integ.span)
		if integ.lb > 0 {
			res.GPUsOverLB = round4(integ.gpus / integ.lb)
		}
	}
	if res.Accepted > 0 {
		res.MovesPerAccepted = round4(float64(res.Moves) / float64(res.Accepted))
	}
	if dra != nil && events > 0 {
		res.SliceWritesPerEvent = round4(float64(dra.writes) / float64(events))
	}
	sort.Float64s(lat)
	res.DecisionP50 = round4(percentile(lat, 0.50))
	res.DecisionP99 = round4(percentile(lat, 0.99))
	return res, nil
}

type mixEntry struct {
	profile mig.Profile
	share   float64
}

// occupancy returns the GPUs in use and the fragmentation: the share of free compute slices
// that a random request of the trace's mix cannot use (free compute on GPUs where it does not
// fit, weighted by the mix).
func occupancy(nodes []mig.Node, mix []mixEntry) (inUse, frag float64) {
	var free, unusable float64
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if !g.State.IsEmpty() {
				inUse++
			}
			f := float64(g.State.FreeComputeSlices())
			if f == 0 {
				continue
			}
			free += f
			for _, m := range mix {
				if !g.State.Fits(m.profile) {
					unusable += m.share * f
				}
			}
		}
	}
	if free > 0 {
		frag = unusable / free
	}
	return inUse, frag
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

type sliceKey struct{ node, gpu, start int }
