package slicemap

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/internal/podrequest"
)

// pendingPods lists the Pending pods that ask for MIG slices, with an explanation per profile
// for the pods not bound to a node yet.
func pendingPods(in Input, opts Options, gpus []room) []PendingPod {
	claims := make(map[podKey]*resourceapi.ResourceClaim, len(in.ResourceClaims))
	for i := range in.ResourceClaims {
		c := &in.ResourceClaims[i]
		claims[podKey{c.Namespace, c.Name}] = c
	}
	templates := make(map[podKey]*resourceapi.ResourceClaimTemplate, len(in.ResourceClaimTemplates))
	for i := range in.ResourceClaimTemplates {
		t := &in.ResourceClaimTemplates[i]
		templates[podKey{t.Namespace, t.Name}] = t
	}
	placed := placedPods(in)
	out := []PendingPod{}
	for i := range in.Pods {
		p := &in.Pods[i]
		if p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
			continue
		}
		if opts.Node != "" && p.Spec.NodeName != opts.Node && p.Status.NominatedNodeName != opts.Node {
			continue
		}
		reqs, ok := migRequests(&p.Spec)
		claimReqs := claimRequests(p, claims, templates)
		if !ok && len(claimReqs) == 0 {
			continue
		}
		pp := PendingPod{
			Namespace: p.Namespace,
			Name:      p.Name,
			Requests:  append(reqs, claimReqs...),
			NodeName:  p.Spec.NodeName,
			Nominated: p.Status.NominatedNodeName,
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				pp.Reason, pp.Message = c.Reason, c.Message
			}
		}
		if pp.NodeName == "" && !placed[podKey{p.Namespace, p.Name}] {
			pp.Explanations = explainAll(pp.Requests, gpus)
		}
		out = append(out, pp)
	}
	slices.SortFunc(out, func(a, b PendingPod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out
}

// placedPods are the pods that hold slices already, though not bound yet (the binding is under
// way): those a SliceAllocation is for, and those an allocated claim of Slicer's driver is
// reserved for. Their room is taken, so they get no explanation.
func placedPods(in Input) map[podKey]bool {
	out := map[podKey]bool{}
	for i := range in.SliceAllocations {
		a := &in.SliceAllocations[i]
		out[podKey{a.Namespace, a.Spec.PodName}] = true
	}
	for i := range in.ResourceClaims {
		c := &in.ResourceClaims[i]
		if len(migdra.AllocatedDevices(c, "")) == 0 {
			continue
		}
		for _, r := range reservedPods(c) {
			out[podKey{c.Namespace, r.Name}] = true
		}
	}
	return out
}

// migRequests lists the slices a pod asks for through resources, Slicer's (podrequest.ForPod,
// the rule every component uses) and NVIDIA's (podrequest.ForNVIDIAResources: DRA mode's
// extended-resource bridge). A pod whose request is invalid is still listed, with no slices:
// the scheduler's message on its PodScheduled condition says what is wrong.
func migRequests(spec *corev1.PodSpec) ([]ResourceRequest, bool) {
	out := []ResourceRequest{}
	mentioned := false
	for _, f := range []struct {
		mentions func(*corev1.PodSpec) bool
		need     func(*corev1.PodSpec) (podrequest.Need, error)
		resource func(string) string
	}{
		{podrequest.Mentions, podrequest.ForPod, mig.ResourceName},
		{podrequest.MentionsNVIDIA, podrequest.ForNVIDIAResources, mig.NVIDIAResourceName},
	} {
		if !f.mentions(spec) {
			continue
		}
		mentioned = true
		need, err := f.need(spec)
		if err != nil {
			continue
		}
		for _, it := range need.Items {
			out = append(out, ResourceRequest{Resource: f.resource(it.Profile), Profile: it.Profile, Count: int64(it.Count)})
		}
	}
	if !mentioned {
		return nil, false
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, true
}

// claimRequests lists the requests of the pod's claims that name a Slicer MIG DeviceClass
// (migdra.ProfileOfClass), read from the claim when it exists (named, or generated from a
// template and recorded in status.resourceClaimStatuses), else from the template.
func claimRequests(p *corev1.Pod, claims map[podKey]*resourceapi.ResourceClaim,
	templates map[podKey]*resourceapi.ResourceClaimTemplate) []ResourceRequest {
	generated := map[string]string{}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			generated[s.Name] = *s.ResourceClaimName
		}
	}
	var out []ResourceRequest
	for _, pc := range p.Spec.ResourceClaims {
		name := generated[pc.Name]
		if pc.ResourceClaimName != nil {
			name = *pc.ResourceClaimName
		}
		var spec *resourceapi.ResourceClaimSpec
		src := ResourceRequest{Claim: name}
		c := claims[podKey{p.Namespace, name}]
		switch {
		case name != "" && c != nil:
			spec = &c.Spec
		case pc.ResourceClaimTemplateName != nil:
			if t := templates[podKey{p.Namespace, *pc.ResourceClaimTemplateName}]; t != nil {
				spec = &t.Spec.Spec
				src = ResourceRequest{ClaimTemplate: t.Name}
			}
		}
		if spec != nil {
			out = append(out, deviceRequests(spec.Devices.Requests, src)...)
		}
	}
	return out
}

// deviceRequests turns a claim's device requests that name a Slicer MIG DeviceClass into
// ResourceRequests carrying src's claim or template.
func deviceRequests(reqs []resourceapi.DeviceRequest, src ResourceRequest) []ResourceRequest {
	var out []ResourceRequest
	add := func(name, class string, mode resourceapi.DeviceAllocationMode, count int64, firstAvailable bool) {
		profile, ok := migdra.ProfileOfClass(class)
		if !ok {
			return
		}
		r := src
		r.Profile, r.DeviceClass, r.Request, r.FirstAvailable = profile, class, name, firstAvailable
		switch mode {
		case resourceapi.DeviceAllocationModeAll:
			r.AllDevices = true
		case resourceapi.DeviceAllocationModeExactCount, "":
			r.Count = max(count, 1) // the API defaults count to 1
		}
		out = append(out, r)
	}
	for _, dr := range reqs {
		if e := dr.Exactly; e != nil {
			add(dr.Name, e.DeviceClassName, e.AllocationMode, e.Count, false)
		}
		for _, sub := range dr.FirstAvailable {
			add(dr.Name+"/"+sub.Name, sub.DeviceClassName, sub.AllocationMode, sub.Count, true)
		}
	}
	return out
}
