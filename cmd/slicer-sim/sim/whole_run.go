package sim

import (
	"fmt"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migsim"
)

// MixedPolicy is how the GPUs of a mixed trace's cluster are run.
type MixedPolicy uint8

const (
	// OnePool: every GPU may switch between MIG and whole mode (Hopper: no reset), with the
	// core's decisions: a whole-GPU pod goes to the node of the best mig.ScoreWhole (ties: the
	// lowest index) and takes mig.PlaceWhole's GPUs; a slice goes to the node of the best
	// mig.Score (migsim.SelectNode), which switches an empty whole GPU only when no MIG GPU of
	// the node has a legal placement (policy.go's switch rule).
	OnePool MixedPolicy = iota
	// StaticSplit: the first MIGNodes nodes are MIG nodes (slices only, always MIG), the others
	// whole-GPU nodes (whole-GPU pods only, always whole); no GPU ever switches. Each side is
	// placed by the same core functions as OnePool.
	StaticSplit
)

// MixedOptions change how a mixed trace is replayed.
type MixedOptions struct {
	Policy MixedPolicy
	// MIGNodes is StaticSplit's number of MIG nodes.
	MIGNodes int
	// StartWhole starts OnePool's GPUs in whole mode (MIG off, as a GPU comes from the
	// factory); otherwise in MIG mode (a Slicer node today).
	StartWhole bool
	// SwitchTime is how long a MIG mode switch takes, in trace time units: the GPU serves
	// nothing until it is done, so a request placed on a switching GPU starts when it ends and
	// its slice-time before that is not accepted.
	SwitchTime float64
	// PackNodes (OnePool only) is a what-if node order, not the scheduler's: a whole-GPU pod
	// goes to the node left with the fewest GPUs free for whole use (then the best
	// mig.ScoreWhole), a slice to a node that already runs something (then the fewest GPUs free
	// for whole use, then the best mig.Score), so that whole nodes stay whole. On the chosen
	// node the GPUs are still mig.PlaceWhole's and mig.Place's. It measures what a node score
	// that counts whole-GPU demand would buy (docs/benchmarks.md).
	PackNodes bool
	// Observe, when set, is called after every event (tests).
	Observe func(MixedStep)
}

// MixedStep is one replayed event, for MixedOptions.Observe.
type MixedStep struct {
	Event    MixedEvent
	Accepted bool
	// Node is where an accepted arrival went; Whole its GPUs (a whole-GPU pod) or Slices its
	// assignments (a slice), Switched the GPUs of Node whose mode this arrival switched.
	Node     int
	Whole    []int
	Slices   []mig.Assignment
	Switched []int
	// Before is a copy of Node's GPUs before the arrival (accepted arrivals only); Nodes the
	// cluster after the event, not to be kept or changed.
	Before []mig.GPU
	Nodes  []mig.Node
}

// MixedResult is a replay's summary. Acceptances are accepted slice-time ÷ offered (compute
// slices × duration; a whole GPU counts the model's compute slices), overall and per class,
// less what accepted requests lost waiting for a switch.
type MixedResult struct {
	Acceptance, WholeAcceptance, SliceAcceptance float64
	Requests, Accepted                           int
	WholeRequests, WholeAccepted                 int
	// Switches counts MIG mode switches, SwitchesPerAccepted per accepted request.
	Switches            int
	SwitchesPerAccepted float64
	// SwitchingShare is the GPU-time spent switching ÷ the cluster's GPU-time over the trace;
	// SwitchLoss the slice-time requests lost waiting for a switch ÷ the offered slice-time.
	SwitchingShare, SwitchLoss float64
	// WholeStranded counts the whole-GPU pods refused while the cluster (the candidate nodes)
	// had enough GPUs free for whole use, but no one node had.
	WholeStranded int
}

// mixedLive is a running request.
type mixedLive struct {
	node  int
	whole []int
	as    []mig.Assignment
}

// mixedReplay is one replay's state.
type mixedReplay struct {
	model   mig.Model
	nodes   []mig.Node
	readyAt [][]float64 // per node and GPU: when its last switch ends
	// The candidate nodes of each class: [sliceLo, sliceHi) and [wholeLo, wholeHi).
	sliceLo, sliceHi, wholeLo, wholeHi int
	reqs                               map[string]*mig.Request
	packNodes                          bool
}

func newMixedReplay(tr *MixedTrace, opt MixedOptions) (*mixedReplay, error) {
	model, err := mig.ParseModel(tr.Cluster.Model)
	if err != nil {
		return nil, err
	}
	n := tr.Cluster.Nodes
	r := &mixedReplay{model: model, nodes: make([]mig.Node, n), readyAt: make([][]float64, n),
		sliceHi: n, wholeHi: n, reqs: map[string]*mig.Request{}, packNodes: opt.PackNodes && opt.Policy == OnePool}
	if opt.Policy == StaticSplit {
		if opt.MIGNodes < 0 || opt.MIGNodes > n {
			return nil, fmt.Errorf("static split of %d MIG nodes on %d nodes", opt.MIGNodes, n)
		}
		r.sliceHi, r.wholeLo = opt.MIGNodes, opt.MIGNodes
	}
	for i := range r.nodes {
		mode, switchable := mig.ModeMIG, true
		switch {
		case opt.Policy == StaticSplit && i >= opt.MIGNodes:
			mode, switchable = mig.ModeWhole, false
		case opt.Policy == StaticSplit:
			switchable = false
		case opt.StartWhole:
			mode = mig.ModeWhole
		}
		gpus := make([]mig.GPU, tr.Cluster.GPUsPerNode)
		for g := range gpus {
			gpus[g] = mig.GPU{State: mig.EmptyGPU(model), Usable: true, Mode: mode, Switchable: switchable}
		}
		r.nodes[i] = mig.Node{GPUs: gpus}
		r.readyAt[i] = make([]float64, len(gpus))
	}
	return r, nil
}

// selectWhole is the candidate node of the best mig.ScoreWhole for n GPUs (ties: the lowest
// index), -1 when none fits; with packNodes, of the fewest GPUs left free for whole use first.
func (r *mixedReplay) selectWhole(n int) int {
	best, bestKey := -1, int64(-1)
	for i := r.wholeLo; i < r.wholeHi; i++ {
		s, ok := mig.ScoreWhole(r.nodes[i], n)
		if !ok {
			continue
		}
		if r.packNodes {
			free, _ := wholeFree(r.nodes[i])
			s += int64(maxNodeGPUs-(free-n)) << 8
		}
		if s > bestKey {
			best, bestKey = i, s
		}
	}
	return best
}

// maxNodeGPUs bounds the GPUs of a node in packNodes' keys.
const maxNodeGPUs = 1 << 10

// wholeFree counts a node's GPUs free for whole use (now or after a switch), and reports
// whether any GPU runs something (a slice or a whole-GPU pod).
func wholeFree(node mig.Node) (int, bool) {
	free, busy := 0, false
	for _, g := range node.GPUs {
		if g.WholeUse() != mig.UseNo {
			free++
		}
		busy = busy || g.InUse || !g.State.IsEmpty()
	}
	return free, busy
}

// selectSlice is the candidate node for req: migsim.SelectNode's, or with packNodes the best
// by (runs something, fewest GPUs free for whole use, mig.Score); -1 when none fits.
func (r *mixedReplay) selectSlice(req *mig.Request) int {
	if !r.packNodes {
		if idx := migsim.SelectNode(migsim.Slicer, r.nodes[r.sliceLo:r.sliceHi], req); idx >= 0 {
			return idx + r.sliceLo
		}
		return -1
	}
	best, bestKey := -1, int64(-1)
	for i := r.sliceLo; i < r.sliceHi; i++ {
		s, ok := mig.Score(r.nodes[i], req)
		if !ok {
			continue
		}
		free, busy := wholeFree(r.nodes[i])
		key := int64(maxNodeGPUs-free)<<8 + s
		if busy {
			key += 2 * maxNodeGPUs << 8
		}
		if key > bestKey {
			best, bestKey = i, key
		}
	}
	return best
}

// stranded reports whether the candidate nodes hold n GPUs free for whole use in all.
func (r *mixedReplay) stranded(n int) bool {
	free := 0
	for i := r.wholeLo; i < r.wholeHi; i++ {
		for _, g := range r.nodes[i].GPUs {
			if g.WholeUse() != mig.UseNo {
				free++
			}
		}
	}
	return free >= n
}

// placeWhole places a whole-GPU pod of n GPUs: the node (-1 when none fits), its GPUs and the
// GPUs it switched.
func (r *mixedReplay) placeWhole(n int) (int, []int, []int, error) {
	idx := r.selectWhole(n)
	if idx < 0 {
		return -1, nil, nil, nil
	}
	c, err := mig.PlaceWhole(r.nodes[idx], n)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("ScoreWhole said node %d fits but PlaceWhole failed: %w", idx, err)
	}
	if err := mig.ApplyWhole(r.nodes[idx], c); err != nil {
		return 0, nil, nil, err
	}
	return idx, c.GPUs, c.Switch, nil
}

// placeSlice places one slice of profile: the node (-1 when none fits), the assignments and
// the GPUs it switched.
func (r *mixedReplay) placeSlice(profile string) (int, []mig.Assignment, []int, error) {
	req, err := r.request(profile)
	if err != nil {
		return 0, nil, nil, err
	}
	idx := r.selectSlice(req)
	if idx < 0 {
		return -1, nil, nil, nil
	}
	as, err := mig.Place(r.nodes[idx], req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("mig.Score said node %d fits but Place failed: %w", idx, err)
	}
	var switched []int
	for _, a := range as {
		if r.nodes[idx].GPUs[a.GPU].Mode != mig.ModeMIG && !containsInt(switched, a.GPU) {
			switched = append(switched, a.GPU)
		}
	}
	if err := mig.Apply(r.nodes[idx], as); err != nil {
		return 0, nil, nil, err
	}
	return idx, as, switched, nil
}

// request is the one-slice request of profile, built once per profile.
func (r *mixedReplay) request(profile string) (*mig.Request, error) {
	if req, ok := r.reqs[profile]; ok {
		return req, nil
	}
	req, err := mig.NewRequest(mig.RequestItem{Profile: profile, Count: 1})
	if err != nil {
		return nil, err
	}
	r.reqs[profile] = req
	return req, nil
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// RunMixed replays a mixed trace under opt.
func RunMixed(tr *MixedTrace, opt MixedOptions) (*MixedResult, error) {
	r, err := newMixedReplay(tr, opt)
	if err != nil {
		return nil, err
	}
	work, err := mixedWork(tr, r.model)
	if err != nil {
		return nil, err
	}
	res := &MixedResult{}
	live := map[string]mixedLive{}
	var offered, accepted, lost [2]float64 // [slice, whole]
	for _, e := range tr.Events {
		step := MixedStep{Event: e, Node: -1}
		switch {
		case e.Arrive != "":
			class := 0
			if e.Whole() {
				class = 1
				res.WholeRequests++
			}
			res.Requests++
			w := work[e.Arrive]
			offered[class] += w.compute * w.duration
			var idx int
			var before []mig.GPU
			l := mixedLive{}
			if e.Whole() {
				if opt.Observe != nil {
					before = snapshotBest(r, r.selectWhole(e.GPUs))
				}
				idx, l.whole, step.Switched, err = r.placeWhole(e.GPUs)
				if err == nil && idx < 0 && r.stranded(e.GPUs) {
					res.WholeStranded++
				}
			} else {
				if opt.Observe != nil {
					before = r.sliceSnapshot(e.Profile)
				}
				idx, l.as, step.Switched, err = r.placeSlice(e.Profile)
			}
			if err != nil {
				return nil, fmt.Errorf("request %q: %w", e.Arrive, err)
			}
			if idx < 0 {
				break
			}
			l.node = idx
			live[e.Arrive] = l
			res.Accepted++
			if class == 1 {
				res.WholeAccepted++
			}
			for _, g := range step.Switched {
				r.readyAt[idx][g] = e.T + opt.SwitchTime
				res.Switches++
			}
			wait := 0.0
			for _, g := range l.gpus() {
				wait = max(wait, r.readyAt[idx][g]-e.T)
			}
			accepted[class] += w.compute * w.duration
			lost[class] += w.compute * min(wait, w.duration)
			step.Accepted, step.Node, step.Whole, step.Slices, step.Before = true, idx, l.whole, l.as, before
		default:
			l, ok := live[e.Depart]
			if !ok {
				break
			}
			delete(live, e.Depart)
			node := r.nodes[l.node]
			for _, g := range l.whole {
				node.GPUs[g].InUse = false
			}
			for _, a := range l.as {
				next, err := node.GPUs[a.GPU].State.Release(a.Profile, a.Placement)
				if err != nil {
					return nil, fmt.Errorf("depart %q: %w", e.Depart, err)
				}
				node.GPUs[a.GPU].State = next
			}
		}
		if opt.Observe != nil {
			step.Nodes = r.nodes
			opt.Observe(step)
		}
	}
	share := func(a, l, o float64) float64 {
		if o == 0 {
			return 0
		}
		return round4((a - l) / o)
	}
	res.SliceAcceptance = share(accepted[0], lost[0], offered[0])
	res.WholeAcceptance = share(accepted[1], lost[1], offered[1])
	res.Acceptance = share(accepted[0]+accepted[1], lost[0]+lost[1], offered[0]+offered[1])
	if o := offered[0] + offered[1]; o > 0 {
		res.SwitchLoss = round4((lost[0] + lost[1]) / o)
	}
	if res.Accepted > 0 {
		res.SwitchesPerAccepted = round4(float64(res.Switches) / float64(res.Accepted))
	}
	if n := len(tr.Events); n > 0 {
		if span := tr.Events[n-1].T - tr.Events[0].T; span > 0 {
			gpus := float64(tr.Cluster.Nodes * tr.Cluster.GPUsPerNode)
			res.SwitchingShare = round6(float64(res.Switches) * opt.SwitchTime / (gpus * span))
		}
	}
	return res, nil
}

// gpus lists the GPUs a running request holds.
func (l mixedLive) gpus() []int {
	if l.whole != nil {
		return l.whole
	}
	gs := make([]int, 0, len(l.as))
	for _, a := range l.as {
		gs = append(gs, a.GPU)
	}
	return gs
}

// snapshotBest copies node idx's GPUs (nil for -1).
func snapshotBest(r *mixedReplay, idx int) []mig.GPU {
	if idx < 0 {
		return nil
	}
	return append([]mig.GPU(nil), r.nodes[idx].GPUs...)
}

// sliceSnapshot copies the GPUs of the node a slice of profile would go to.
func (r *mixedReplay) sliceSnapshot(profile string) []mig.GPU {
	req, err := r.request(profile)
	if err != nil {
		return nil
	}
	return snapshotBest(r, r.selectSlice(req))
}

// mixedOffer is one arrival's compute slices and duration.
type mixedOffer struct{ compute, duration float64 }

// mixedWork is every arrival's offer; a request that never departs lasts to the trace's end.
func mixedWork(tr *MixedTrace, model mig.Model) (map[string]mixedOffer, error) {
	end := 0.0
	if n := len(tr.Events); n > 0 {
		end = tr.Events[n-1].T
	}
	out := map[string]mixedOffer{}
	start := map[string]float64{}
	for _, e := range tr.Events {
		if e.Arrive == "" {
			if t0, ok := start[e.Depart]; ok {
				o := out[e.Depart]
				o.duration = e.T - t0
				out[e.Depart] = o
			}
			continue
		}
		if _, dup := out[e.Arrive]; dup {
			return nil, fmt.Errorf("request %q arrives twice", e.Arrive)
		}
		var c int
		switch {
		case e.GPUs > 0 && e.Profile != "":
			return nil, fmt.Errorf("request %q asks for a slice and whole GPUs", e.Arrive)
		case e.GPUs > 0:
			if e.GPUs > tr.Cluster.GPUsPerNode {
				return nil, fmt.Errorf("request %q asks for %d GPUs on nodes of %d", e.Arrive, e.GPUs, tr.Cluster.GPUsPerNode)
			}
			c = e.GPUs * model.ComputeSlices()
		default:
			p, err := model.Profile(e.Profile)
			if err != nil {
				return nil, fmt.Errorf("request %q: %w", e.Arrive, err)
			}
			c = p.ComputeSlices
		}
		start[e.Arrive] = e.T
		out[e.Arrive] = mixedOffer{compute: float64(c), duration: end - e.T}
	}
	return out, nil
}

// MixedPoolResult is the reference without geometry: acceptance overall and per class.
type MixedPoolResult struct {
	Acceptance, WholeAcceptance, SliceAcceptance float64
}

// RunMixedPool replays the trace on one pool of the cluster's compute and memory slices with no
// GPU or node boundaries: a slice takes its profile's compute and memory slices, a whole-GPU pod
// of N GPUs N GPUs' worth of both, from anywhere, first come first served, no switch. A
// reference for the headroom, not a strict bound (a greedy pool can refuse what a policy with
// geometry accepts later).
func RunMixedPool(tr *MixedTrace) (*MixedPoolResult, error) {
	model, err := mig.ParseModel(tr.Cluster.Model)
	if err != nil {
		return nil, err
	}
	work, err := mixedWork(tr, model)
	if err != nil {
		return nil, err
	}
	gpus := tr.Cluster.Nodes * tr.Cluster.GPUsPerNode
	freeC, freeM := gpus*model.ComputeSlices(), gpus*model.MemorySlices()
	type size struct{ compute, memory int }
	live := map[string]size{}
	var offered, accepted [2]float64
	for _, e := range tr.Events {
		if e.Arrive == "" {
			if sz, ok := live[e.Depart]; ok {
				freeC, freeM = freeC+sz.compute, freeM+sz.memory
				delete(live, e.Depart)
			}
			continue
		}
		class, sz := 0, size{}
		if e.Whole() {
			class, sz = 1, size{e.GPUs * model.ComputeSlices(), e.GPUs * model.MemorySlices()}
		} else {
			p, err := model.Profile(e.Profile)
			if err != nil {
				return nil, err
			}
			sz = size{p.ComputeSlices, p.MemorySlices}
		}
		w := work[e.Arrive]
		offered[class] += w.compute * w.duration
		if sz.compute <= freeC && sz.memory <= freeM {
			freeC, freeM = freeC-sz.compute, freeM-sz.memory
			live[e.Arrive] = sz
			accepted[class] += w.compute * w.duration
		}
	}
	share := func(a, o float64) float64 {
		if o == 0 {
			return 0
		}
		return round4(a / o)
	}
	return &MixedPoolResult{
		Acceptance:      share(accepted[0]+accepted[1], offered[0]+offered[1]),
		WholeAcceptance: share(accepted[1], offered[1]),
		SliceAcceptance: share(accepted[0], offered[0]),
	}, nil
}
