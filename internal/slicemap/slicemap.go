// Package slicemap builds and renders the slice map of a cluster: for every NodeAccelerator,
// every GPU with an occupancy bar of its memory slices, every realized MIG slice joined with the
// SliceAllocation that holds it and that allocation's pod, the allocations not realized yet, and
// the pods that wait for a slicer.dev/mig-* resource.
//
// Build and WriteText are pure (values in, values out; geometry from internal/mig); Fetch is
// the thin part that lists the objects through a client.Reader. The `slicer slice-map` command
// is Fetch → Build → WriteText (or JSON).
package slicemap

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/podrequest"
)

// Input is what the map is built from: the objects as listed from the apiserver.
type Input struct {
	NodeAccelerators []slicerv1alpha1.NodeAccelerator
	SliceAllocations []slicerv1alpha1.SliceAllocation
	Pods             []corev1.Pod
}

// Options tune Build.
type Options struct {
	// Node keeps only this node ("" for all). Pending pods are kept when they are bound or
	// nominated to it.
	Node string
}

// Map is the slice map. Its JSON form is the stable output of `slicer slice-map -o json`.
type Map struct {
	Nodes       []Node       `json:"nodes"`
	PendingPods []PendingPod `json:"pendingPods"`
}

// Node is one node: its NodeAccelerator's GPUs and the allocations on it not realized yet.
type Node struct {
	Name string `json:"name"`
	// NoAccelerator is true when SliceAllocations name the node but it has no NodeAccelerator.
	NoAccelerator bool   `json:"noAccelerator,omitempty"`
	Driver        string `json:"driver,omitempty"`
	DriverVersion string `json:"driverVersion,omitempty"`
	GPUs          []GPU  `json:"gpus"`
	// Unrealized are the SliceAllocations naming this node that no slice in status.gpus
	// references (Pending, Creating, Failed, or not yet reported by the agent).
	Unrealized []Allocation `json:"unrealized"`
}

// GPU is one entry of status.gpus.
type GPU struct {
	Index   int32  `json:"index"`
	UUID    string `json:"uuid"`
	Model   string `json:"model"`
	MIGMode string `json:"migMode"`
	Health  string `json:"health"`
	// MemorySlices is the model's number of memory slices (0 when the model is unknown).
	MemorySlices int `json:"memorySlices"`
	// Columns holds, per memory slice, the key of the slice that covers it ("" when free,
	// "!" when more than one slice claims it).
	Columns []string `json:"columns"`
	// Bar is Columns rendered on one line, e.g. "[a a a a|b|.|.|.]".
	Bar    string  `json:"bar"`
	Slices []Slice `json:"slices"`
	// Problems are inconsistencies found in the reported geometry (illegal placement,
	// overlap, unknown profile or model).
	Problems []string `json:"problems,omitempty"`
}

// Slice is one realized MIG slice (status.gpus[].slices[]).
type Slice struct {
	// Key is the letter that marks the slice's columns in the GPU's bar.
	Key               string      `json:"key"`
	Profile           string      `json:"profile"`
	Start             int32       `json:"start"`
	Size              int32       `json:"size"`
	State             string      `json:"state"`
	MIGDeviceUUID     string      `json:"migDeviceUUID,omitempty"`
	GPUInstanceID     int32       `json:"gpuInstanceID"`
	ComputeInstanceID int32       `json:"computeInstanceID"`
	Allocation        *Allocation `json:"allocation,omitempty"`
}

// Allocation is a SliceAllocation (or, with Missing, a reference to one that does not exist).
type Allocation struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Missing is true when a slice references an allocation that does not exist.
	Missing bool   `json:"missing,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Profile string `json:"profile,omitempty"`
	Start   int32  `json:"start"`
	Size    int32  `json:"size"`
	GPUUUID string `json:"gpuUUID,omitempty"`
	// GPUIndex is the index of spec.gpuUUID on the node, -1 when the node reports no such GPU.
	GPUIndex int32 `json:"gpuIndex"`
	Pod      *Pod  `json:"pod,omitempty"`
}

// Pod is the pod an allocation is for.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	// Phase is the pod's phase; "" when the pod does not exist.
	Phase string `json:"phase,omitempty"`
	// Missing is true when no pod of that name exists.
	Missing bool `json:"missing,omitempty"`
	// UIDMismatch is true when a pod of that name exists with another UID (the allocation is
	// for an earlier incarnation).
	UIDMismatch bool `json:"uidMismatch,omitempty"`
	// Terminating is true when the pod has a deletion timestamp.
	Terminating bool `json:"terminating,omitempty"`
}

// PendingPod is a Pending pod that requests slicer.dev/mig-* resources.
type PendingPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Requests are the MIG resources asked for, sorted by resource name.
	Requests []ResourceRequest `json:"requests"`
	NodeName string            `json:"nodeName,omitempty"`
	// Nominated is status.nominatedNodeName.
	Nominated string `json:"nominatedNodeName,omitempty"`
	// Reason and Message come from the PodScheduled condition when it is False.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ResourceRequest is how many of one MIG resource a pod asks for.
type ResourceRequest struct {
	Resource string `json:"resource"`
	Profile  string `json:"profile"`
	Count    int64  `json:"count"`
}

type podKey struct{ namespace, name string }

// Build computes the slice map. It never fails: inconsistent input is reported in the map
// (GPU.Problems, Allocation.Missing, Pod.Missing/UIDMismatch).
func Build(in Input, opts Options) Map {
	pods := make(map[podKey]*corev1.Pod, len(in.Pods))
	for i := range in.Pods {
		p := &in.Pods[i]
		pods[podKey{p.Namespace, p.Name}] = p
	}
	allocs := make(map[podKey]*slicerv1alpha1.SliceAllocation, len(in.SliceAllocations))
	for i := range in.SliceAllocations {
		a := &in.SliceAllocations[i]
		allocs[podKey{a.Namespace, a.Name}] = a
	}

	nodes := map[string]*Node{}
	realized := map[podKey]bool{}
	gpuIndex := map[string]map[string]int32{} // node → GPU UUID → index
	for i := range in.NodeAccelerators {
		na := &in.NodeAccelerators[i]
		if opts.Node != "" && na.Name != opts.Node {
			continue
		}
		n := &Node{
			Name:          na.Name,
			Driver:        string(na.Status.Driver),
			DriverVersion: na.Status.DriverVersion,
			GPUs:          []GPU{},
			Unrealized:    []Allocation{},
		}
		idx := map[string]int32{}
		for _, g := range na.Status.GPUs {
			idx[g.UUID] = g.Index
		}
		gpuIndex[na.Name] = idx
		for _, g := range na.Status.GPUs {
			n.GPUs = append(n.GPUs, buildGPU(g, allocs, pods, realized, idx))
		}
		sort.SliceStable(n.GPUs, func(a, b int) bool { return n.GPUs[a].Index < n.GPUs[b].Index })
		nodes[na.Name] = n
	}

	for i := range in.SliceAllocations {
		a := &in.SliceAllocations[i]
		if realized[podKey{a.Namespace, a.Name}] {
			continue
		}
		if opts.Node != "" && a.Spec.NodeName != opts.Node {
			continue
		}
		n := nodes[a.Spec.NodeName]
		if n == nil {
			n = &Node{Name: a.Spec.NodeName, NoAccelerator: true, GPUs: []GPU{}, Unrealized: []Allocation{}}
			nodes[a.Spec.NodeName] = n
		}
		n.Unrealized = append(n.Unrealized, allocation(a, pods, gpuIndex[a.Spec.NodeName]))
	}

	out := Map{Nodes: []Node{}, PendingPods: pendingPods(in.Pods, opts)}
	for _, n := range nodes {
		sort.Slice(n.Unrealized, func(i, j int) bool {
			a, b := n.Unrealized[i], n.Unrealized[j]
			if a.Namespace != b.Namespace {
				return a.Namespace < b.Namespace
			}
			return a.Name < b.Name
		})
		out.Nodes = append(out.Nodes, *n)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Name < out.Nodes[j].Name })
	return out
}

func buildGPU(g slicerv1alpha1.GPUStatus, allocs map[podKey]*slicerv1alpha1.SliceAllocation,
	pods map[podKey]*corev1.Pod, realized map[podKey]bool, idx map[string]int32) GPU {
	out := GPU{
		Index:   g.Index,
		UUID:    g.UUID,
		Model:   string(g.Model),
		MIGMode: string(g.MIGMode),
		Health:  string(g.Health),
		Columns: []string{},
		Slices:  []Slice{},
	}
	slices := append([]slicerv1alpha1.MIGSlice(nil), g.Slices...)
	sort.SliceStable(slices, func(i, j int) bool { return slices[i].Placement.Start < slices[j].Placement.Start })
	for i, s := range slices {
		sl := Slice{
			Key:               sliceKey(i),
			Profile:           string(s.Profile),
			Start:             s.Placement.Start,
			Size:              s.Placement.Size,
			State:             string(s.State),
			MIGDeviceUUID:     s.MIGDeviceUUID,
			GPUInstanceID:     s.GPUInstanceID,
			ComputeInstanceID: s.ComputeInstanceID,
		}
		if s.Allocation != nil {
			k := podKey{s.Allocation.Namespace, s.Allocation.Name}
			if a := allocs[k]; a != nil {
				al := allocation(a, pods, idx)
				sl.Allocation = &al
				realized[k] = true
			} else {
				sl.Allocation = &Allocation{Namespace: k.namespace, Name: k.name, Missing: true, GPUIndex: -1}
			}
		}
		out.Slices = append(out.Slices, sl)
	}
	out.MemorySlices, out.Problems = checkGeometry(g.Model, slices)
	if out.MemorySlices > 0 {
		out.Columns = make([]string, out.MemorySlices)
		for i, s := range out.Slices {
			for c := s.Start; c < s.Start+s.Size; c++ {
				if c < 0 || int(c) >= out.MemorySlices {
					continue // reported as a problem by checkGeometry
				}
				switch out.Columns[c] {
				case "":
					out.Columns[c] = out.Slices[i].Key
				default:
					out.Columns[c] = overlapKey
				}
			}
		}
	}
	out.Bar = bar(out.Columns)
	return out
}

// overlapKey marks a memory slice claimed by more than one slice.
const overlapKey = "!"

// sliceKey is the bar letter of the i-th slice of a GPU (by start).
func sliceKey(i int) string {
	const keys = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	if i < len(keys) {
		return keys[i : i+1]
	}
	return "?"
}

// checkGeometry returns the model's number of memory slices and what is wrong with the
// reported slices according to the model tables of internal/mig.
func checkGeometry(model slicerv1alpha1.GPUModel, slices []slicerv1alpha1.MIGSlice) (int, []string) {
	if model == "" {
		if len(slices) == 0 {
			return 0, nil
		}
		return 0, []string{"GPU model not reported: slice geometry cannot be checked"}
	}
	m, err := mig.ParseModel(string(model))
	if err != nil {
		return 0, []string{err.Error()}
	}
	var problems []string
	var instances []mig.Instance
	for _, s := range slices {
		pl := mig.Placement{Start: int(s.Placement.Start), Size: int(s.Placement.Size)}
		p, err := m.Profile(string(s.Profile))
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if _, err := mig.EmptyGPU(m).Take(p, pl); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		instances = append(instances, mig.Instance{Profile: p.Name, Placement: pl})
	}
	if len(problems) == 0 {
		if _, err := mig.NewGPUState(m, instances); err != nil {
			problems = append(problems, fmt.Sprintf("slices cannot coexist: %v", err))
		}
	}
	return m.MemorySlices(), problems
}

// bar renders columns as "[a a a a|b|.|.|.]": a space joins the columns of one slice, a '|'
// separates different holders, '.' is a free memory slice.
func bar(columns []string) string {
	if len(columns) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, c := range columns {
		if i > 0 {
			if c != "" && c != overlapKey && c == columns[i-1] {
				b.WriteByte(' ')
			} else {
				b.WriteByte('|')
			}
		}
		if c == "" {
			c = "."
		}
		b.WriteString(c)
	}
	b.WriteByte(']')
	return b.String()
}

func allocation(a *slicerv1alpha1.SliceAllocation, pods map[podKey]*corev1.Pod, idx map[string]int32) Allocation {
	out := Allocation{
		Namespace: a.Namespace,
		Name:      a.Name,
		State:     string(a.Status.State),
		Reason:    a.Status.Reason,
		Message:   a.Status.Message,
		Profile:   string(a.Spec.Profile),
		Start:     a.Spec.Placement.Start,
		Size:      a.Spec.Placement.Size,
		GPUUUID:   a.Spec.GPUUUID,
		GPUIndex:  -1,
	}
	if i, ok := idx[a.Spec.GPUUUID]; ok {
		out.GPUIndex = i
	}
	if a.Spec.PodName != "" {
		p := &Pod{Namespace: a.Namespace, Name: a.Spec.PodName, UID: a.Spec.PodUID}
		pod := pods[podKey{a.Namespace, a.Spec.PodName}]
		switch {
		case pod == nil:
			p.Missing = true
		case a.Spec.PodUID != "" && string(pod.UID) != a.Spec.PodUID:
			p.UIDMismatch = true
			p.Phase = string(pod.Status.Phase)
		default:
			p.Phase = string(pod.Status.Phase)
		}
		p.Terminating = pod != nil && pod.DeletionTimestamp != nil
		out.Pod = p
	}
	return out
}

func pendingPods(pods []corev1.Pod, opts Options) []PendingPod {
	out := []PendingPod{}
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
			continue
		}
		if opts.Node != "" && p.Spec.NodeName != opts.Node && p.Status.NominatedNodeName != opts.Node {
			continue
		}
		reqs, ok := migRequests(&p.Spec)
		if !ok {
			continue
		}
		pp := PendingPod{
			Namespace: p.Namespace,
			Name:      p.Name,
			Requests:  reqs,
			NodeName:  p.Spec.NodeName,
			Nominated: p.Status.NominatedNodeName,
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				pp.Reason, pp.Message = c.Reason, c.Message
			}
		}
		out = append(out, pp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// migRequests lists the slices a pod needs (podrequest.ForPod, the rule every component uses).
// A pod whose request is invalid is still listed, with no slices: the scheduler's message on
// its PodScheduled condition says what is wrong.
func migRequests(spec *corev1.PodSpec) ([]ResourceRequest, bool) {
	if !podrequest.Mentions(spec) {
		return nil, false
	}
	need, err := podrequest.ForPod(spec)
	if err != nil {
		return []ResourceRequest{}, true
	}
	out := make([]ResourceRequest, 0, len(need.Items))
	for _, it := range need.Items {
		out = append(out, ResourceRequest{Resource: mig.ResourceName(it.Profile), Profile: it.Profile, Count: int64(it.Count)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, true
}
