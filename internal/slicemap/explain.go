package slicemap

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// Explanation says why a pending pod's profile has no room, from Slicer's side: the stock
// scheduler of DRA mode only says "cannot allocate all claims". It is computed from the map's
// GPUs with internal/mig's geometry, in the words the device-plugin scheduler uses
// (mig.GPUState.WhyNot, migapi.GPUBlocked).
type Explanation struct {
	// Profile is the profile (NVIDIA spelling).
	Profile string `json:"profile"`
	// Fits is how many GPUs could take one slice of the profile now.
	Fits int `json:"fits"`
	// GPUs has one verdict per GPU of the map, by node and index.
	GPUs []GPUVerdict `json:"gpus"`
}

// GPUVerdict is whether one GPU can take one slice of a profile now, and why not.
type GPUVerdict struct {
	Node  string `json:"node"`
	Index int32  `json:"index"`
	// Obstacle is "" when the GPU can take the profile; otherwise a migapi.Blocked kind
	// (unsupportedModel, migDisabled, unhealthy, nodeBlocked, wholeMode, switchingMode), a mig.Obstacle kind (model: no
	// such profile on this model; countLimit, mediaEngines, full, fragmented), or
	// "inconsistent" (the reported slices do not add up).
	Obstacle string `json:"obstacle,omitempty"`
	// Reason words the obstacle.
	Reason string `json:"reason,omitempty"`
	// Placements are where the profile fits now ("start+size"), when it does.
	Placements []string `json:"placements,omitempty"`
}

// obstacleInconsistent: the GPU's reported slices and not yet realized allocations or claims
// cannot coexist, so its room is unknown.
const obstacleInconsistent = "inconsistent"

// room is one GPU's capacity for new slices: whether it can take any, and its occupancy
// counting the slices that exist and those allocated but not realized yet.
type room struct {
	node    string
	index   int32
	blocked migapi.Blocked
	why     string
	state   mig.GPUState
	err     error
}

// rooms computes the capacity of every GPU of accels; nodes holds their allocations and claims
// not realized yet.
func rooms(accels []*slicerv1alpha1.NodeAccelerator, nodes map[string]*Node) []room {
	var out []room
	for _, na := range accels {
		n := nodes[na.Name]
		for gi := range na.Status.GPUs {
			g := &na.Status.GPUs[gi]
			r := room{node: na.Name, index: g.Index}
			if r.blocked, r.why = migapi.GPUBlocked(na, g); r.blocked == migapi.NotBlocked {
				r.state, r.err = occupancy(g, n)
			}
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b room) int {
		return cmp.Or(strings.Compare(a.node, b.node), cmp.Compare(a.index, b.index))
	})
	return out
}

// occupancy is the GPU's state with its slices and the node's unrealized allocations and
// unprepared claims on it (mig.Occupancy: each placement once, holders not compared).
func occupancy(g *slicerv1alpha1.GPUStatus, n *Node) (mig.GPUState, error) {
	m, err := mig.ParseModel(string(g.Model))
	if err != nil {
		return mig.GPUState{}, err
	}
	occ := migapi.AppendReported(nil, g)
	add := func(profile string, start, size int32) {
		occ = append(occ, mig.Occupant{Instance: mig.Instance{Profile: profile,
			Placement: migapi.Placement(slicerv1alpha1.Placement{Start: start, Size: size})}})
	}
	for _, a := range n.Unrealized {
		if a.GPUUUID == g.UUID {
			add(a.Profile, a.Start, a.Size)
		}
	}
	for _, c := range n.Unprepared {
		if c.GPUIndex == g.Index && c.Size > 0 {
			add(c.Profile, c.Start, c.Size)
		}
	}
	if sg := gpuAt(n, g.Index); sg != nil && len(sg.WholeClaims) > 0 {
		if st, ok := fullGPU(m); ok {
			return st, nil // allocated whole: no slice fits beside it, whatever its mode now
		}
	}
	return mig.Occupancy(m, occ, mig.FailOnMisfit)
}

// fullGPU is a GPU of model m with no room left: its profile that spans every compute and
// memory slice, at start 0 (false for a model with none).
func fullGPU(m mig.Model) (mig.GPUState, bool) {
	for _, p := range m.Profiles() {
		if p.ComputeSlices == m.ComputeSlices() && p.MemorySlices == m.MemorySlices() {
			if st, err := mig.NewGPUState(m, []mig.Instance{{Profile: p.Name, Placement: mig.Placement{Start: 0, Size: p.MemorySlices}}}); err == nil {
				return st, true
			}
		}
	}
	return mig.GPUState{}, false
}

// explainAll explains each distinct profile of the requests, largest first (mig.SortSlices).
func explainAll(reqs []ResourceRequest, gpus []room) []Explanation {
	seen := map[string]bool{}
	var profiles []string
	for _, r := range reqs {
		if r.Profile != "" && !seen[r.Profile] {
			seen[r.Profile] = true
			profiles = append(profiles, r.Profile)
		}
	}
	var out []Explanation
	for _, p := range mig.SortSlices(profiles) {
		out = append(out, explain(p, gpus))
	}
	return out
}

// explain says, per GPU, whether one slice of profile fits now and why not.
func explain(profile string, gpus []room) Explanation {
	e := Explanation{Profile: profile, GPUs: []GPUVerdict{}}
	for _, r := range gpus {
		v := GPUVerdict{Node: r.node, Index: r.index}
		switch {
		case r.blocked != migapi.NotBlocked:
			v.Obstacle, v.Reason = string(r.blocked), r.why
		case r.err != nil:
			v.Obstacle, v.Reason = obstacleInconsistent, fmt.Sprintf("its slices and allocations do not add up: %v", r.err)
		default:
			m := r.state.Model()
			p, err := m.Profile(profile)
			if err != nil {
				v.Obstacle, v.Reason = string(mig.ObstacleModel), fmt.Sprintf("no %s profile on %s", mig.LegalProfileName(profile), m)
				break
			}
			if o := r.state.Obstacle(p); o != mig.NoObstacle {
				v.Obstacle, v.Reason = string(o), r.state.WhyNot(p)
				break
			}
			for _, pl := range r.state.Candidates(p) {
				v.Placements = append(v.Placements, fmt.Sprintf("%d+%d", pl.Start, pl.Size))
			}
			e.Fits++
		}
		e.GPUs = append(e.GPUs, v)
	}
	return e
}
