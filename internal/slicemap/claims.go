package slicemap

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// Claim is a ResourceClaim that holds a slice, or is allocated a MIG device of Slicer's DRA
// driver (migdra.DriverName) whose slice is not prepared yet; with Missing, a reference to a
// claim that does not exist.
type Claim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is the claim's UID (the reference's when the claim is missing).
	UID string `json:"uid,omitempty"`
	// Device is the DRA device name (gpu-<index>-<profile>-at-<start>).
	Device string `json:"device,omitempty"`
	// Missing is true when a slice names a claim that does not exist.
	Missing bool `json:"missing,omitempty"`
	// UIDMismatch is true when a claim of that name exists with another UID (the slice was
	// made for an earlier claim of that name).
	UIDMismatch bool `json:"uidMismatch,omitempty"`
	// Allocated is true when the claim's status.allocation holds the device in this node's
	// pool.
	Allocated bool `json:"allocated"`
	// Whole: the device is a whole GPU (migdra.WholeGPUDeviceName); it has no profile nor
	// placement, and is listed on its GPU (GPU.WholeClaims) rather than as not prepared.
	Whole   bool   `json:"whole,omitempty"`
	Profile string `json:"profile,omitempty"`
	Start   int32  `json:"start"`
	// Size is 0 when the profile's geometry is unknown (no NodeAccelerator lists the GPU).
	Size int32 `json:"size"`
	// GPUIndex is the GPU index the device name carries.
	GPUIndex int32 `json:"gpuIndex"`
	// Problem says what could not be read (a device name that does not parse, a GPU index the
	// node does not report).
	Problem string `json:"problem,omitempty"`
	// Pods are the pods the claim is reserved for (status.reservedFor), in that order.
	Pods []Pod `json:"pods"`
}

// claimDevice is one device of one claim.
type claimDevice struct{ namespace, name, device string }

// sliceClaim joins a slice's claim reference with the claim listed.
func (j *joiner) sliceClaim(node string, gpu int32, s slicerv1alpha1.MIGSlice) Claim {
	ref := s.Claim
	out := Claim{
		Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID, Device: ref.Device,
		Profile: string(s.Profile), Start: s.Placement.Start, Size: s.Placement.Size, GPUIndex: gpu,
		Pods: []Pod{},
	}
	c := j.claims[podKey{ref.Namespace, ref.Name}]
	switch {
	case c == nil:
		out.Missing = true
		return out
	case ref.UID != "" && string(c.UID) != ref.UID:
		out.UIDMismatch = true
		return out
	}
	out.UID = string(c.UID)
	// A reference without a device (an older writer) accounts for all the claim's devices here.
	for _, r := range migdra.AllocatedDevices(c, "") {
		if r.Pool == node && (ref.Device == "" || r.Device == ref.Device) {
			out.Allocated = true
			j.prepared[claimDevice{c.Namespace, c.Name, r.Device}] = true
		}
	}
	out.Pods = j.reservedFor(c)
	return out
}

// reservedFor lists the pods a claim is reserved for.
func (j *joiner) reservedFor(c *resourceapi.ResourceClaim) []Pod {
	pods := []Pod{}
	for _, r := range reservedPods(c) {
		pods = append(pods, j.pod(c.Namespace, r.Name, string(r.UID)))
	}
	return pods
}

// reservedPods are the entries of a claim's status.reservedFor that are pods.
func reservedPods(c *resourceapi.ResourceClaim) []resourceapi.ResourceClaimConsumerReference {
	var out []resourceapi.ResourceClaimConsumerReference
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			out = append(out, r)
		}
	}
	return out
}

// unpreparedClaim is a claim device with no slice yet, on a node (the pool's name).
type unpreparedClaim struct {
	node  string
	claim Claim
}

// unprepared lists the devices of Slicer's driver allocated to claims that no slice names,
// sorted by node, claim and device. The device name carries the GPU index, the profile and the
// start; the GPU's model, when its NodeAccelerator reports it, gives the size.
func (j *joiner) unprepared(accels []slicerv1alpha1.NodeAccelerator) []unpreparedClaim {
	models := map[string]map[int32]slicerv1alpha1.GPUModel{} // node → GPU index → model
	for i := range accels {
		m := map[int32]slicerv1alpha1.GPUModel{}
		for _, g := range accels[i].Status.GPUs {
			m[g.Index] = g.Model
		}
		models[accels[i].Name] = m
	}
	var out []unpreparedClaim
	for _, c := range j.claims {
		for _, r := range migdra.AllocatedDevices(c, "") {
			if j.prepared[claimDevice{c.Namespace, c.Name, r.Device}] {
				continue
			}
			cl := Claim{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID), Device: r.Device, Allocated: true, Pods: j.reservedFor(c)}
			readDevice(&cl, models[r.Pool])
			out = append(out, unpreparedClaim{node: r.Pool, claim: cl})
		}
	}
	slices.SortFunc(out, func(x, y unpreparedClaim) int {
		return cmp.Or(strings.Compare(x.node, y.node), strings.Compare(x.claim.Namespace, y.claim.Namespace),
			strings.Compare(x.claim.Name, y.claim.Name), strings.Compare(x.claim.Device, y.claim.Device))
	})
	return out
}

// readDevice fills a claim's geometry from its device name: the GPU index, the profile
// (Kubernetes spelling, as slices report it) and the start; the size too when models (the
// node's GPU models by index, nil without a NodeAccelerator) know the GPU. What cannot be
// read goes to Problem.
func readDevice(cl *Claim, models map[int32]slicerv1alpha1.GPUModel) {
	cl.GPUIndex = -1
	if i, ok := migdra.ParseWholeDeviceName(cl.Device); ok {
		cl.GPUIndex, cl.Whole = int32(i), true
		return
	}
	ref, err := migdra.ParseDeviceName(cl.Device)
	if err != nil {
		cl.Problem = err.Error()
		return
	}
	cl.GPUIndex, cl.Start = int32(ref.GPU), int32(ref.Start)
	name, ok := ref.ProfileName()
	if !ok {
		cl.Problem = fmt.Sprintf("device %s: no MIG profile %q", cl.Device, ref.ProfileToken)
		return
	}
	cl.Profile = string(migapi.APIProfile(name))
	if models == nil {
		return
	}
	model, listed := models[cl.GPUIndex]
	if !listed {
		cl.Problem = fmt.Sprintf("the node reports no GPU %d", ref.GPU)
		return
	}
	m, err := mig.ParseModel(string(model))
	if err != nil {
		cl.Problem = err.Error()
		return
	}
	if _, pl, err := ref.Resolve(m); err != nil {
		cl.Problem = err.Error()
	} else {
		cl.Size = int32(pl.Size)
	}
}
