package mig

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"
)

// GPUState is the MIG occupancy of one GPU: which (profile, placement) slots are taken. It is a
// small comparable value (model + index into the model's table of legal states); every method
// is a table lookup. The zero value belongs to no model and fits nothing.
type GPUState struct {
	model Model
	idx   uint16
}

// Instance is one GPU instance on a GPU, as the agent reports it.
type Instance struct {
	// Profile name in either spelling.
	Profile   string    `json:"profile"`
	Placement Placement `json:"placement"`
}

// EmptyGPU is the state of a GPU of model m with no GPU instance.
func EmptyGPU(m Model) GPUState {
	if tableFor(m) == nil {
		return GPUState{}
	}
	return GPUState{model: m}
}

// NewGPUState builds a GPU's state from the instances that exist on it. Inconsistent input
// (unknown profile, illegal placement, overlap, over a count limit) is an error, never a panic.
func NewGPUState(m Model, instances []Instance) (GPUState, error) {
	if tableFor(m) == nil {
		return GPUState{}, fmt.Errorf("unknown GPU model %d", int(m))
	}
	s := GPUState{model: m}
	for i, in := range instances {
		p, err := m.Profile(in.Profile)
		if err != nil {
			return GPUState{}, fmt.Errorf("instance %d: %w", i, err)
		}
		next, err := s.Take(p, in.Placement)
		if err != nil {
			return GPUState{}, fmt.Errorf("instance %d: %w", i, err)
		}
		s = next
	}
	return s, nil
}

// Model is the GPU model of the state.
func (s GPUState) Model() Model { return s.model }

// Valid reports whether the state belongs to a known model.
func (s GPUState) Valid() bool { return s.model.Valid() }

// IsEmpty reports whether no GPU instance exists.
func (s GPUState) IsEmpty() bool { return s.idx == 0 }

func (s GPUState) table() *modelTable { return tableFor(s.model) }

func (t *modelTable) slotFor(p Profile, pl Placement) (int, error) {
	if p.Model == 0 || tableFor(p.Model) != t || int(p.index) >= len(t.profiles) || t.profiles[p.index].Name != p.Name {
		return noSlot, fmt.Errorf("profile %q is not a profile of %s", p.Name, t.spec.name)
	}
	if pl.Size != p.MemorySlices || pl.Start < 0 || pl.Start >= maxStarts || t.slotOf[p.index][pl.Start] == noSlot {
		return noSlot, fmt.Errorf("placement %v is not a legal placement of %s on %s (legal starts %v, size %d)",
			pl, p.Name, t.spec.name, p.Starts, p.MemorySlices)
	}
	return int(t.slotOf[p.index][pl.Start]), nil
}

// Take returns the state with profile p created at placement pl, or an error when pl is not a
// legal placement of p, overlaps a taken placement, or exceeds a count or media limit.
func (s GPUState) Take(p Profile, pl Placement) (GPUState, error) {
	t := s.table()
	if t == nil {
		return s, fmt.Errorf("GPU state has no model")
	}
	sl, err := t.slotFor(p, pl)
	if err != nil {
		return s, err
	}
	next := t.take[int(s.idx)*t.nslots()+sl]
	if next == noState {
		return s, fmt.Errorf("cannot create %s at %v on %s: %s", p.Name, pl, t.spec.name, s.whyNot(t, sl))
	}
	return GPUState{model: s.model, idx: uint16(next)}, nil
}

// Release returns the state with the instance of profile p at placement pl destroyed, or an
// error when there is no such instance.
func (s GPUState) Release(p Profile, pl Placement) (GPUState, error) {
	t := s.table()
	if t == nil {
		return s, fmt.Errorf("GPU state has no model")
	}
	sl, err := t.slotFor(p, pl)
	if err != nil {
		return s, err
	}
	prev := t.release[int(s.idx)*t.nslots()+sl]
	if prev == noState {
		return s, fmt.Errorf("no %s instance at %v on this %s", p.Name, pl, t.spec.name)
	}
	return GPUState{model: s.model, idx: uint16(prev)}, nil
}

// Has reports whether an instance of p exists at pl.
func (s GPUState) Has(p Profile, pl Placement) bool {
	t := s.table()
	if t == nil {
		return false
	}
	sl, err := t.slotFor(p, pl)
	return err == nil && t.states[s.idx]&(1<<sl) != 0
}

// Fits reports whether one more instance of p can be created. Zero allocations.
func (s GPUState) Fits(p Profile) bool {
	t := s.table()
	if t == nil || p.Model != s.model || int(p.index) >= len(t.profiles) {
		return false
	}
	return t.nvmlSlot[int(s.idx)*t.nprof()+int(p.index)] != noSlot
}

// Count is the number of instances of p on the GPU.
func (s GPUState) Count(p Profile) int {
	t := s.table()
	if t == nil || p.Model != s.model || int(p.index) >= len(t.profiles) {
		return 0
	}
	return bits.OnesCount32(t.states[s.idx] & t.profMask[p.index])
}

// Candidates lists the placements where p can be created now, in NVML order.
func (s GPUState) Candidates(p Profile) []Placement { return s.AppendCandidates(nil, p) }

// AppendCandidates appends the placements where p can be created now to dst (no allocation
// when dst has room).
func (s GPUState) AppendCandidates(dst []Placement, p Profile) []Placement {
	t := s.table()
	if t == nil || p.Model != s.model || int(p.index) >= len(t.profiles) {
		return dst
	}
	ns := t.nslots()
	for _, start := range p.Starts {
		if t.take[int(s.idx)*ns+int(t.slotOf[p.index][start])] != noState {
			dst = append(dst, Placement{Start: start, Size: p.MemorySlices})
		}
	}
	return dst
}

// InstanceCount is how many GPU instances the state holds (no allocation).
func (s GPUState) InstanceCount() int {
	t := s.table()
	if t == nil {
		return 0
	}
	return bits.OnesCount32(t.states[s.idx])
}

// Instances lists the GPU instances, ordered by start then profile table order.
func (s GPUState) Instances() []Instance {
	t := s.table()
	if t == nil {
		return nil
	}
	var out []Instance
	mask := t.states[s.idx]
	for i, sl := range t.slots {
		if mask&(1<<i) != 0 {
			out = append(out, Instance{Profile: t.profiles[sl.prof].Name, Placement: Placement{Start: int(sl.start), Size: int(sl.size)}})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Placement.Start < out[j].Placement.Start })
	return out
}

// UsedComputeSlices is the number of compute slices held by instances.
func (s GPUState) UsedComputeSlices() int {
	t := s.table()
	if t == nil {
		return 0
	}
	return int(t.compute[s.idx])
}

// FreeComputeSlices is the number of compute slices not held by any instance.
func (s GPUState) FreeComputeSlices() int {
	t := s.table()
	if t == nil {
		return 0
	}
	return t.spec.computeSlices - int(t.compute[s.idx])
}

// UsedMemorySlices is the number of memory slices covered by instances.
func (s GPUState) UsedMemorySlices() int {
	t := s.table()
	if t == nil {
		return 0
	}
	return bits.OnesCount16(t.used[s.idx])
}

// String renders the state as "H100-80GB[3g.40gb@0 1g.10gb@6]".
func (s GPUState) String() string {
	if !s.Valid() {
		return "GPUState(invalid)"
	}
	var b strings.Builder
	b.WriteString(s.model.String())
	b.WriteByte('[')
	for i, in := range s.Instances() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s@%d", in.Profile, in.Placement.Start)
	}
	b.WriteByte(']')
	return b.String()
}

// Obstacle is why a profile cannot be created on a GPU now, as a kind a program can branch
// on; WhyNot words it.
type Obstacle string

const (
	// NoObstacle: the profile fits.
	NoObstacle Obstacle = ""
	// ObstacleModel: the GPU has no known model, or the profile is not one of its model's.
	ObstacleModel Obstacle = "model"
	// ObstacleCountLimit: the GPU already holds the model's maximum of that profile.
	ObstacleCountLimit Obstacle = "countLimit"
	// ObstacleMediaEngines: a +me profile, and another +me instance holds the media engines.
	ObstacleMediaEngines Obstacle = "mediaEngines"
	// ObstacleFull: fewer free compute or memory slices than the profile needs.
	ObstacleFull Obstacle = "full"
	// ObstacleFragmented: enough memory and compute slices are free, but not at any legal
	// placement of the profile.
	ObstacleFragmented Obstacle = "fragmented"
)

// Obstacle classifies why p cannot be created on the GPU (NoObstacle when it fits).
func (s GPUState) Obstacle(p Profile) Obstacle {
	t := s.table()
	switch {
	case t == nil || p.Model != s.model || int(p.index) >= len(t.profiles):
		return ObstacleModel
	case s.Fits(p):
		return NoObstacle
	}
	mask := t.states[s.idx]
	ps := &t.spec.profiles[p.index]
	switch {
	case bits.OnesCount32(mask&t.profMask[p.index]) >= ps.maxCount:
		return ObstacleCountLimit
	case ps.media() && mask&t.media != 0:
		return ObstacleMediaEngines
	case int(t.compute[s.idx])+ps.compute > t.spec.computeSlices,
		t.spec.memorySlices-bits.OnesCount16(t.used[s.idx]) < ps.memory:
		return ObstacleFull
	default:
		return ObstacleFragmented
	}
}

// WhyNot explains in words why p cannot be created on the GPU ("" when it fits).
func (s GPUState) WhyNot(p Profile) string {
	t := s.table()
	if t == nil {
		return "GPU has no known model"
	}
	if p.Model != s.model {
		return fmt.Sprintf("%s is not a profile of %s", p.Name, s.model)
	}
	ps := &t.spec.profiles[p.index]
	switch s.Obstacle(p) {
	case NoObstacle:
		return ""
	case ObstacleCountLimit:
		return fmt.Sprintf("%s count limit reached (%d of %d)", p.Name, s.Count(p), ps.maxCount)
	case ObstacleMediaEngines:
		return "the media engines are held by another +me instance"
	}
	if int(t.compute[s.idx])+ps.compute > t.spec.computeSlices {
		return fmt.Sprintf("only %d compute slices free, %s needs %d", t.spec.computeSlices-int(t.compute[s.idx]), p.Name, ps.compute)
	}
	return fmt.Sprintf("no free block of %d memory slices at a legal start %v (used memory slices %s)",
		ps.memory, ps.starts, usedString(t.used[s.idx], t.spec.memorySlices))
}

func (s GPUState) whyNot(t *modelTable, sl int) string {
	mask := t.states[s.idx]
	if mask&(1<<sl) != 0 {
		return "already taken"
	}
	if t.used[s.idx]&t.slots[sl].mem != 0 {
		return "overlaps an existing instance"
	}
	return s.WhyNot(t.profiles[t.slots[sl].prof])
}

func usedString(used uint16, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = '.'
		if used&(1<<i) != 0 {
			b[i] = '#'
		}
	}
	return string(b)
}
