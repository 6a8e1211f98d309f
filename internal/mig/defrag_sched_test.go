package mig

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
)

// The planner called as the scheduler plugin calls it (scheduler/plugin/defrag.go,
// defrag_dest.go): default bounds (DefaultDefragMoves, the default work bound, no chains), a
// movability callback that remembers the pod it found at each slice in a SliceIndex reused
// between calls (the plugin's movableIndex.pods), and Destinations that give each moved slice
// its pod's node filters (spec.unschedulable, nodeSelector, NoSchedule taints), asked once per
// node by the planner.

// schedNode is what the node filters read of a node.
type schedNode struct {
	labels        map[string]string
	unschedulable bool
	tainted       bool // a NoSchedule taint
}

// schedPod is a moved slice's pod as the node filters read it.
type schedPod struct {
	selector  map[string]string
	tolerates bool // the tainted nodes' taint
	// class numbers what the node filters read of the pod (DefragOptions.DestinationClass):
	// pods whose selector and toleration print alike share a number, from 1 up.
	class int
}

// schedCluster is a cluster with the scheduler's view of its nodes and of the pods at its
// slices (pods[gpu in node then GPU order][start], nil where no movable pod is).
type schedCluster struct {
	nodes []Node
	attrs []schedNode
	pods  [][8]*schedPod
}

const zoneLabel = "topology.kubernetes.io/zone"

// schedIndex is one call's movability index (the plugin's movableIndex): the pods found at
// the slices asked about, in a SliceIndex taken from schedIndexes and handed back when the call
// is done, as the plugin does (defragmenter.indexes).
type schedIndex struct {
	c     *schedCluster
	found SliceIndex[*schedPod]
}

// schedIndexes holds the indexes of calls done, for the next calls to reuse.
var schedIndexes sync.Pool

func (c *schedCluster) index() *schedIndex {
	x, _ := schedIndexes.Get().(*schedIndex)
	if x == nil {
		x = &schedIndex{}
	}
	x.c = c
	x.found.Reset(len(c.nodes))
	return x
}

// release hands x back to schedIndexes; it must not be used after.
func (x *schedIndex) release() {
	x.c = nil
	x.found.Reset(0)
	schedIndexes.Put(x)
}

func (x *schedIndex) at(n, g int, _ Profile, pl Placement) bool {
	pod := x.c.pods[n*8+g][pl.Start]
	if pod == nil {
		return false
	}
	x.found.Add(n, g, pl.Start, pod)
	return true
}

// podAt is the pod found at the slice from, nil when none was.
func (x *schedIndex) podAt(from SliceAt) *schedPod {
	pod, _ := x.found.At(from)
	return pod
}

func (x *schedIndex) destinations(from SliceAt) func(int) bool {
	pod := x.podAt(from)
	if pod == nil {
		return func(int) bool { return false }
	}
	return func(n int) bool { return x.c.admits(pod, n) } // asked once per node (DestinationFunc)
}

func (c *schedCluster) admits(pod *schedPod, n int) bool {
	a := &c.attrs[n]
	if a.unschedulable || (a.tainted && !pod.tolerates) {
		return false
	}
	for k, v := range pod.selector {
		if a.labels[k] != v {
			return false
		}
	}
	return true
}

func (x *schedIndex) class(from SliceAt) int {
	if pod := x.podAt(from); pod != nil {
		return pod.class
	}
	return 0
}

// plan is PlanDefrag as the plugin calls it, destination classes naming each moved slice's pod's
// node selector and toleration (noOpen: the search without the opening-set rule, as it was
// before it; deep: DefragOptions.DeepWork).
func (c *schedCluster) plan(req *Request, noOpen bool, maxMoves, deep int) DefragResult {
	x := c.index()
	defer x.release()
	opt := DefragOptions{MaxMoves: maxMoves, Destinations: x.destinations, DestinationClass: x.class,
		RepackGPUs: DefaultRepackGPUs, DeepWork: deep}
	return planDefragRules(c.nodes, req, x.at, opt, false, noOpen)
}

// crowdedCluster is benchCluster's 5,000 × 8 H100 with crowd 0.98 (about 800 GPUs with room for
// a 1g.10gb, the others full), 90 % of the slices movable, in four zones of consecutive nodes,
// 1 % of the nodes cordoned and 2 % tainted NoSchedule. A movable slice's pod selects its node's
// zone with probability pZone and tolerates the taint with probability 0.1. Then shape edits
// the nodes' attributes (the adversarial cases).
func crowdedCluster(seed uint64, pending Profile, pZone float64, shape func(c *schedCluster)) *schedCluster {
	const nodes = 5000
	rng := rand.New(rand.NewPCG(seed, 27))
	ns, movable := benchCluster(rng, nodes, pending, 0.9, 0.98)
	c := &schedCluster{nodes: ns, attrs: make([]schedNode, nodes), pods: make([][8]*schedPod, nodes*8)}
	classes := map[string]int{}
	for n := range c.attrs {
		c.attrs[n] = schedNode{
			labels:        map[string]string{zoneLabel: "zone-" + strconv.Itoa(n*4/nodes), "kubernetes.io/hostname": "node-" + strconv.Itoa(n)},
			unschedulable: rng.Float64() < 0.01,
			tainted:       rng.Float64() < 0.02,
		}
	}
	for n := range ns {
		for g, gpu := range ns[n].GPUs {
			for _, in := range gpu.State.Instances() {
				if !movable(n, g, Profile{}, in.Placement) {
					continue
				}
				pod := &schedPod{tolerates: rng.Float64() < 0.1}
				if rng.Float64() < pZone {
					pod.selector = map[string]string{zoneLabel: c.attrs[n].labels[zoneLabel]}
				}
				name := fmt.Sprintf("%v/%t", pod.selector, pod.tolerates)
				if pod.class = classes[name]; pod.class == 0 {
					pod.class = len(classes) + 1
					classes[name] = pod.class
				}
				c.pods[n*8+g][in.Placement.Start] = pod
			}
		}
	}
	if shape != nil {
		shape(c)
	}
	return c
}

// roomNodes are the nodes with a GPU where a 1g.10gb fits now.
func (c *schedCluster) roomNodes() []int {
	one, _ := H100_80GB.Profile("1g.10gb")
	var out []int
	for n := range c.nodes {
		for _, g := range c.nodes[n].GPUs {
			if g.State.Fits(one) {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

// deepCluster is 5,000 × 8 H100 where a pending 4g.40gb has plans of three moves only, on
// the last zone's nodes (three quarters of the way through the search): every GPU holds
// 1g.10gb@0, 1g.10gb@1 and 2g.20gb@2 (movable) beside a 3g.40gb@4 that may not move, and GPU 7 of
// the last 20 nodes a 4g.40gb@0 that may not move, its upper half free; each movable pod selects
// its zone.
func deepCluster() *schedCluster {
	const nodes = 5000
	in := func(p string, start int) Instance {
		q, _ := H100_80GB.Profile(p)
		return Instance{Profile: p, Placement: Placement{Start: start, Size: q.MemorySlices}}
	}
	full, _ := NewGPUState(H100_80GB, []Instance{in("1g.10gb", 0), in("1g.10gb", 1), in("2g.20gb", 2), in("3g.40gb", 4)})
	room, _ := NewGPUState(H100_80GB, []Instance{in("4g.40gb", 0)})
	c := &schedCluster{nodes: make([]Node, nodes), attrs: make([]schedNode, nodes), pods: make([][8]*schedPod, nodes*8)}
	classes := map[string]int{}
	for n := range c.nodes {
		zone := "zone-" + strconv.Itoa(n*4/nodes)
		c.attrs[n] = schedNode{labels: map[string]string{zoneLabel: zone}}
		if classes[zone] == 0 {
			classes[zone] = len(classes) + 1
		}
		c.nodes[n].GPUs = make([]GPU, 8)
		for g := range c.nodes[n].GPUs {
			if g == 7 && n >= nodes-20 {
				c.nodes[n].GPUs[g] = GPU{State: room, Usable: true}
				continue
			}
			c.nodes[n].GPUs[g] = GPU{State: full, Usable: true}
			for _, start := range []int{0, 1, 2} {
				c.pods[n*8+g][start] = &schedPod{selector: map[string]string{zoneLabel: zone}, class: classes[zone]}
			}
		}
	}
	return c
}

// BenchmarkPlanDefragScheduler plans on crowded 5,000 × 8 H100 clusters (crowdedCluster) as the
// scheduler plugin does (destination classes, repack plans, default bounds), for a pending
// 7g.80gb, 4g.40gb or 3g.40gb; each case has four clusters (fixed seeds) and reports
// benchPlans' percentiles, the share of calls that found a plan, that a work bound stopped, the
// removal sets examined per call, and the share of calls whose plan the deeper search's work
// bound missed: no plan within the bound, one without it (DefragOptions.DeepWork -1, run after
// the timed calls).
//
//   - "crowded": half the pods select their zone.
//   - "no-plan": every node that has room for a slice is cordoned (the room is on nodes being
//     drained): no moved slice may go anywhere, so no plan exists, and every GPU that k
//     removals could open is examined at each level.
//   - "late": as "no-plan", but the room on the last 20 nodes is schedulable and every pod
//     selects its zone: only slices in the last zone (node 3,750 on, three quarters of the way
//     through the search) can move, to those nodes.
//   - "deep": deepCluster, whose only plans have three moves, three quarters of the way through.
//
// benchPlans' old-cpu-* here is the planner without the opening-set rule (defrag_open.go), run
// alternately on the same thread. DEFRAG_BENCH_MAX_MOVES=N runs both with DefragOptions.MaxMoves
// N (default DefaultDefragMoves, as the scheduler's maxMovesPerPlan), DEFRAG_BENCH_DEEP_WORK=N
// with DefragOptions.DeepWork N (default 0, DefaultDefragDeepWork).
func BenchmarkPlanDefragScheduler(b *testing.B) {
	maxMoves, _ := strconv.Atoi(os.Getenv("DEFRAG_BENCH_MAX_MOVES"))
	if maxMoves <= 0 {
		maxMoves = DefaultDefragMoves
	}
	deep, _ := strconv.Atoi(os.Getenv("DEFRAG_BENCH_DEEP_WORK"))
	cordonRoom := func(keep int) func(c *schedCluster) {
		return func(c *schedCluster) {
			for _, n := range c.roomNodes() {
				c.attrs[n].unschedulable = n < len(c.nodes)-keep
			}
		}
	}
	cases := []struct {
		name    string
		profile string
		pZone   float64
		shape   func(c *schedCluster)
	}{
		{"crowded/7g.80gb", "7g.80gb", 0.5, nil},
		{"crowded/4g.40gb", "4g.40gb", 0.5, nil},
		{"crowded/3g.40gb", "3g.40gb", 0.5, nil},
		{"no-plan/7g.80gb", "7g.80gb", 0.5, cordonRoom(0)},
		{"no-plan/4g.40gb", "4g.40gb", 0.5, cordonRoom(0)},
		{"late/4g.40gb", "4g.40gb", 1, cordonRoom(20)},
		{"deep/4g.40gb", "4g.40gb", 0, nil},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			pending, _ := H100_80GB.Profile(bc.profile)
			req := MustRequest(RequestItem{Profile: bc.profile, Count: 1})
			var sc []*schedCluster
			for i := uint64(0); i < 4; i++ {
				if bc.name == "deep/4g.40gb" {
					sc = append(sc, deepCluster())
					continue
				}
				sc = append(sc, crowdedCluster(5000+i, pending, bc.pZone, bc.shape))
			}
			results := benchPlans(b, func(i int, old bool) DefragResult {
				return sc[i%len(sc)].plan(req, old, maxMoves, deep)
			})
			planned, bounded, sets, late, missed := 0, 0, 0, 0, 0
			for i, res := range results {
				sets += res.RemovalSets
				if res.Bounded {
					bounded++
					if res.Outcome != DefragPlanned && sc[i%len(sc)].plan(req, false, maxMoves, -1).Outcome == DefragPlanned {
						missed++
					}
				}
				if res.Outcome == DefragPlanned {
					planned++
					if res.Plan.Target.Node >= 3750 {
						late++
					}
				}
			}
			b.ReportMetric(float64(planned)/float64(b.N), "planned")
			b.ReportMetric(float64(bounded)/float64(b.N), "bounded")
			b.ReportMetric(float64(missed)/float64(b.N), "missed")
			b.ReportMetric(float64(sets)/float64(b.N), "sets/call")
			if planned > 0 {
				b.ReportMetric(float64(late)/float64(planned), "late-target")
			}
		})
	}
}
