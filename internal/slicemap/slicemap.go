// Package slicemap builds and renders the slice map of a cluster: for every NodeAccelerator,
// every GPU with an occupancy bar of its memory slices, every realized MIG slice joined with
// what holds it (a SliceAllocation in device-plugin mode, a ResourceClaim in DRA mode) and its
// pod(s), the allocations not realized and the claims not prepared yet, and the pods that wait
// for a MIG slice, each with why the GPUs cannot take it (explain.go).
//
// Build and WriteText are pure (values in, values out; geometry from internal/mig); Fetch is
// the thin part that lists the objects through a client.Reader. The `slicer slice-map` command
// is Fetch → Build → WriteText (or JSON).
package slicemap

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Input is what the map is built from: the objects as listed from the apiserver. The claims
// and templates are empty where resource.k8s.io/v1 is not served.
type Input struct {
	NodeAccelerators       []slicerv1alpha1.NodeAccelerator
	SliceAllocations       []slicerv1alpha1.SliceAllocation
	Pods                   []corev1.Pod
	ResourceClaims         []resourceapi.ResourceClaim
	ResourceClaimTemplates []resourceapi.ResourceClaimTemplate
	// Events are the Events of reason slicerv1alpha1.EventDefragmentationPlanned.
	Events []corev1.Event
	// UpgradingNodes are the nodes under a driver upgrade (slicer.dev/driver-upgrade set).
	UpgradingNodes []corev1.Node
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

// Node is one node: its NodeAccelerator's GPUs and the allocations and claims on it not
// realized yet.
type Node struct {
	Name string `json:"name"`
	// NoAccelerator is true when SliceAllocations or allocated claims name the node but it has
	// no NodeAccelerator.
	NoAccelerator bool   `json:"noAccelerator,omitempty"`
	Driver        string `json:"driver,omitempty"`
	DriverVersion string `json:"driverVersion,omitempty"`
	// DriverUpgrade is set while the operator upgrades the node's driver.
	DriverUpgrade *DriverUpgrade `json:"driverUpgrade,omitempty"`
	GPUs          []GPU          `json:"gpus"`
	// Unrealized are the SliceAllocations naming this node that no slice in status.gpus
	// references (Pending, Creating, Failed, or not yet reported by the agent).
	Unrealized []Allocation `json:"unrealized"`
	// Unprepared are the MIG devices of driver mig.slicer.dev allocated to a ResourceClaim in
	// this node's pool that no slice in status.gpus names (DRA mode: allocated, not prepared).
	Unprepared []Claim `json:"unprepared"`
}

// GPU is one entry of status.gpus.
type GPU struct {
	Index   int32  `json:"index"`
	UUID    string `json:"uuid"`
	Model   string `json:"model"`
	MIGMode string `json:"migMode"`
	// Mode is how the agent publishes the GPU (status.gpus[].mode: Whole, MIG, Switching), with
	// where a switch stands; "" from an agent that predates GPU modes.
	Mode   string `json:"mode,omitempty"`
	Health string `json:"health"`
	// Whole are the allocations that hold the GPU whole (spec.wholeGPU), by name.
	Whole []Allocation `json:"whole,omitempty"`
	// WholeClaims are the ResourceClaims allocated the GPU's whole-GPU device (DRA mode).
	WholeClaims []Claim `json:"wholeClaims,omitempty"`
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
	// Claim is the ResourceClaim that holds the slice (DRA mode).
	Claim *Claim `json:"claim,omitempty"`
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
	// WholeGPU: the allocation holds its GPU whole; it has no profile nor placement.
	WholeGPU bool   `json:"wholeGPU,omitempty"`
	Start    int32  `json:"start"`
	Size     int32  `json:"size"`
	GPUUUID  string `json:"gpuUUID,omitempty"`
	// GPUIndex is the index of spec.gpuUUID on the node, -1 when the node reports no such GPU.
	GPUIndex int32 `json:"gpuIndex"`
	Pod      *Pod  `json:"pod,omitempty"`
}

// Pod is the pod an allocation is for, or one a claim is reserved for.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	// Phase is the pod's phase; "" when the pod does not exist.
	Phase string `json:"phase,omitempty"`
	// Missing is true when no pod of that name exists.
	Missing bool `json:"missing,omitempty"`
	// UIDMismatch is true when a pod of that name exists with another UID (the allocation or
	// claim is for an earlier incarnation).
	UIDMismatch bool `json:"uidMismatch,omitempty"`
	// Terminating is true when the pod has a deletion timestamp.
	Terminating bool `json:"terminating,omitempty"`
}

// PendingPod is a Pending pod that asks for MIG slices: slicer.dev/mig-* or nvidia.com/mig-*
// resources, or ResourceClaims (or templates) whose requests name a DeviceClass of
// migdra.ClassName.
type PendingPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Requests are the MIG slices asked for: resources sorted by resource name, then claim
	// requests in the pod's order.
	Requests []ResourceRequest `json:"requests"`
	NodeName string            `json:"nodeName,omitempty"`
	// Nominated is status.nominatedNodeName.
	Nominated string `json:"nominatedNodeName,omitempty"`
	// Reason and Message come from the PodScheduled condition when it is False.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Explanations say, per profile the pod asks for, which GPUs of the map could take one
	// slice of it now and why the others cannot; only for pods not bound to a node that hold
	// no allocation or allocated claim yet (for the others the binding is under way).
	Explanations []Explanation `json:"explanations,omitempty"`
	// Preemption is set in DRA mode when no GPU can take the pod now but evicting pods of
	// lower priority would: kube-scheduler does not preempt for claims (preemption.go).
	Preemption string `json:"preemption,omitempty"`
	// Defragmentation is the latest plan of moves Slicer's scheduler recommended for the pod
	// (its DefragmentationPlanned Event), with when it was made.
	Defragmentation string `json:"defragmentation,omitempty"`
}

// ResourceRequest is how many slices of one profile a pod asks for, through a resource or
// through a request of a ResourceClaim.
type ResourceRequest struct {
	// Resource is the extended resource (slicer.dev/mig-* or nvidia.com/mig-*); "" for a
	// claim's request.
	Resource string `json:"resource"`
	Profile  string `json:"profile"`
	Count    int64  `json:"count"`
	// DeviceClass is the DeviceClass a claim's request names.
	DeviceClass string `json:"deviceClass,omitempty"`
	// Claim is the ResourceClaim the request is read from; ClaimTemplate the template when the
	// pod's claim is not generated yet.
	Claim         string `json:"claim,omitempty"`
	ClaimTemplate string `json:"claimTemplate,omitempty"`
	// Request is the request's name in the claim ("<request>/<subrequest>" for an alternative
	// of a firstAvailable request).
	Request string `json:"request,omitempty"`
	// AllDevices is true for allocationMode All (Count is then 0).
	AllDevices bool `json:"allDevices,omitempty"`
	// FirstAvailable is true for one alternative of a firstAvailable request.
	FirstAvailable bool `json:"firstAvailable,omitempty"`
}

type podKey struct{ namespace, name string }

// joiner holds the listed objects by key and records which of them a slice names.
type joiner struct {
	pods     map[podKey]*corev1.Pod
	allocs   map[podKey]*slicerv1alpha1.SliceAllocation
	claims   map[podKey]*resourceapi.ResourceClaim
	realized map[podKey]bool      // allocations a slice names
	prepared map[claimDevice]bool // claim devices a slice names
}

// Build computes the slice map. It never fails: inconsistent input is reported in the map
// (GPU.Problems, Allocation.Missing, Claim.Missing/UIDMismatch/Problem, Pod.Missing/UIDMismatch).
func Build(in Input, opts Options) Map {
	j := joiner{
		pods:     make(map[podKey]*corev1.Pod, len(in.Pods)),
		allocs:   make(map[podKey]*slicerv1alpha1.SliceAllocation, len(in.SliceAllocations)),
		claims:   make(map[podKey]*resourceapi.ResourceClaim, len(in.ResourceClaims)),
		realized: map[podKey]bool{},
		prepared: map[claimDevice]bool{},
	}
	for i := range in.Pods {
		p := &in.Pods[i]
		j.pods[podKey{p.Namespace, p.Name}] = p
	}
	for i := range in.SliceAllocations {
		a := &in.SliceAllocations[i]
		j.allocs[podKey{a.Namespace, a.Name}] = a
	}
	for i := range in.ResourceClaims {
		c := &in.ResourceClaims[i]
		j.claims[podKey{c.Namespace, c.Name}] = c
	}

	nodes := map[string]*Node{}
	gpuIndex := map[string]map[string]int32{} // node → GPU UUID → index
	var accels []*slicerv1alpha1.NodeAccelerator
	for i := range in.NodeAccelerators {
		na := &in.NodeAccelerators[i]
		if opts.Node != "" && na.Name != opts.Node {
			continue
		}
		accels = append(accels, na)
		n := &Node{
			Name:          na.Name,
			Driver:        string(na.Status.Driver),
			DriverVersion: na.Status.DriverVersion,
			GPUs:          []GPU{},
			Unrealized:    []Allocation{},
			Unprepared:    []Claim{},
		}
		idx := map[string]int32{}
		for _, g := range na.Status.GPUs {
			idx[g.UUID] = g.Index
		}
		gpuIndex[na.Name] = idx
		for _, g := range na.Status.GPUs {
			n.GPUs = append(n.GPUs, j.buildGPU(na.Name, g, idx))
		}
		sort.SliceStable(n.GPUs, func(a, b int) bool { return n.GPUs[a].Index < n.GPUs[b].Index })
		nodes[na.Name] = n
	}
	node := func(name string) *Node {
		n := nodes[name]
		if n == nil {
			n = &Node{Name: name, NoAccelerator: true, GPUs: []GPU{}, Unrealized: []Allocation{}, Unprepared: []Claim{}}
			nodes[name] = n
		}
		return n
	}

	for i := range in.SliceAllocations {
		a := &in.SliceAllocations[i]
		if j.realized[podKey{a.Namespace, a.Name}] {
			continue
		}
		if opts.Node != "" && a.Spec.NodeName != opts.Node {
			continue
		}
		n := node(a.Spec.NodeName)
		n.Unrealized = append(n.Unrealized, j.allocation(a, gpuIndex[a.Spec.NodeName]))
	}
	for _, u := range j.unprepared(in.NodeAccelerators) {
		if opts.Node != "" && u.node != opts.Node {
			continue
		}
		n := node(u.node)
		if g := gpuAt(n, u.claim.GPUIndex); u.claim.Whole && g != nil {
			g.WholeClaims = append(g.WholeClaims, u.claim)
			continue
		}
		n.Unprepared = append(n.Unprepared, u.claim)
	}

	upgrades := upgradesOf(in.UpgradingNodes)
	for name, n := range nodes {
		n.DriverUpgrade = upgrades[name]
	}
	out := Map{Nodes: []Node{}}
	for _, n := range nodes {
		slices.SortFunc(n.Unrealized, func(a, b Allocation) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
		})
		out.Nodes = append(out.Nodes, *n)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Name < out.Nodes[j].Name })
	out.PendingPods = pendingPods(in, opts, rooms(accels, nodes))
	addPreemptionNotes(out.PendingPods, in, out.Nodes)
	addDefragmentationPlans(out.PendingPods, in)
	return out
}

func (j *joiner) buildGPU(node string, g slicerv1alpha1.GPUStatus, idx map[string]int32) GPU {
	out := GPU{
		Index:   g.Index,
		UUID:    g.UUID,
		Model:   string(g.Model),
		MIGMode: string(g.MIGMode),
		Mode:    string(g.Mode),
		Health:  string(g.Health),
		Columns: []string{},
		Slices:  []Slice{},
	}
	if sw := g.ModeSwitch; sw != nil {
		out.Mode += fmt.Sprintf(" (to %s, %s: %s)", sw.TargetMode, sw.Phase, sw.Reason)
	}
	for _, k := range slices.SortedFunc(maps.Keys(j.allocs), func(a, b podKey) int {
		return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name))
	}) {
		if a := j.allocs[k]; a.Spec.WholeGPU && a.Spec.GPUUUID == g.UUID && a.Spec.NodeName == node {
			out.Whole = append(out.Whole, j.allocation(a, idx))
			j.realized[k] = true
		}
	}
	byStart := append([]slicerv1alpha1.MIGSlice(nil), g.Slices...)
	sort.SliceStable(byStart, func(i, j int) bool { return byStart[i].Placement.Start < byStart[j].Placement.Start })
	for i, s := range byStart {
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
			if a := j.allocs[k]; a != nil {
				al := j.allocation(a, idx)
				sl.Allocation = &al
				j.realized[k] = true
			} else {
				sl.Allocation = &Allocation{Namespace: k.namespace, Name: k.name, Missing: true, GPUIndex: -1}
			}
		}
		if s.Claim != nil {
			c := j.sliceClaim(node, g.Index, s)
			sl.Claim = &c
		}
		out.Slices = append(out.Slices, sl)
	}
	out.MemorySlices, out.Problems = checkGeometry(g.Model, byStart)
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
func checkGeometry(model slicerv1alpha1.GPUModel, reported []slicerv1alpha1.MIGSlice) (int, []string) {
	if model == "" {
		if len(reported) == 0 {
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
	for _, s := range reported {
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

func (j *joiner) allocation(a *slicerv1alpha1.SliceAllocation, idx map[string]int32) Allocation {
	out := Allocation{
		Namespace: a.Namespace,
		Name:      a.Name,
		State:     string(a.Status.State),
		Reason:    a.Status.Reason,
		Message:   a.Status.Message,
		Profile:   string(a.Spec.Profile),
		WholeGPU:  a.Spec.WholeGPU,
		GPUUUID:   a.Spec.GPUUUID,
		GPUIndex:  -1,
	}
	if pl := a.Spec.Placement; pl != nil {
		out.Start, out.Size = pl.Start, pl.Size
	}
	if i, ok := idx[a.Spec.GPUUUID]; ok {
		out.GPUIndex = i
	}
	if a.Spec.PodName != "" {
		p := j.pod(a.Namespace, a.Spec.PodName, a.Spec.PodUID)
		out.Pod = &p
	}
	return out
}

// pod joins a reference to a pod (namespace, name and, if known, UID) with the pod listed.
func (j *joiner) pod(namespace, name, uid string) Pod {
	p := Pod{Namespace: namespace, Name: name, UID: uid}
	pod := j.pods[podKey{namespace, name}]
	switch {
	case pod == nil:
		p.Missing = true
	case uid != "" && string(pod.UID) != uid:
		p.UIDMismatch = true
		p.Phase = string(pod.Status.Phase)
	default:
		p.Phase = string(pod.Status.Phase)
	}
	p.Terminating = pod != nil && pod.DeletionTimestamp != nil
	return p
}

// gpuAt is the node's GPU of that index, nil when the node reports none.
func gpuAt(n *Node, index int32) *GPU {
	for i := range n.GPUs {
		if n.GPUs[i].Index == index {
			return &n.GPUs[i]
		}
	}
	return nil
}
