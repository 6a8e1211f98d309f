package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/podrequest"
)

// KubeletPods reports every pod the kubelet lists (admitted, or being
// admitted) with the Slicer MIG devices it holds: "namespace/name" →
// resource → device IDs (podresources.Client.PodDevices).
type KubeletPods interface {
	PodDevices(ctx context.Context) (map[string]map[string][]string, error)
}

// Chooser answers the kubelet's GetPreferredAllocation with the devices the
// scheduler's SliceAllocations meant for the pod being admitted (docs/design/invariants.md,
// N8). The kubelet does
// not say which pod it admits; it admits pods one at a time, oldest first within a
// batch, and adds each to the list PodResources reports just before admitting it. So
// the pod being admitted is taken to be the pod that reuses a mustInclude device from
// its init container, else the oldest pod that the kubelet lists, that holds fewer
// devices of the resource than it needs, and whose Ready allocation's device is
// available. See preferred for the rule. Answers come from the agent's cache; the API
// server is read only on a miss (input).
type Chooser struct {
	// Cache is the agent's informer cache (CacheOptions: the node's SliceAllocations and
	// the pods bound to it). Every answer reads it; none lists from the API server.
	Cache client.Reader
	// Live reads the API server on a cache miss, by targeted GETs only: the kubelet asks
	// while it admits a pod it has just seen bound, and the cache may not have that pod
	// (or its allocations) yet.
	Live    client.Reader
	Node    string
	Kubelet KubeletPods
	// Timeout bounds one answer (default 2s): the kubelet waits for it.
	Timeout time.Duration
	Log     logr.Logger
}

// Preferred implements plugin.Preferrer. Any trouble yields nil: the kubelet
// then chooses by itself, and the agent records what it chose.
func (c *Chooser) Preferred(ctx context.Context, resource string, available, mustInclude []string, size int) []string {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	in, err := c.input(ctx, resource)
	if err != nil {
		c.Log.Error(err, "no preferred allocation; the kubelet chooses", "resource", resource)
		return nil
	}
	in.Available, in.MustInclude, in.Size = available, mustInclude, size
	ids, pod := preferred(in)
	c.Log.Info("preferred allocation", "resource", resource, "pod", pod, "devices", ids, "available", len(available), "size", size)
	return ids
}

// input reads the node's allocations and their pods from the cache. A pod the kubelet lists
// that may be the one it admits (it asks for the resource and holds fewer devices than it
// needs) and that the cache does not have, or has without all its allocations Ready, is
// read with targeted GETs: the pod by name, its missing or not yet Ready allocations by
// their names (slicerv1alpha1.AllocationName).
func (c *Chooser) input(ctx context.Context, resource string) (preferInput, error) {
	in := preferInput{Node: c.Node, Resource: resource, Pods: map[string]*corev1.Pod{}}
	if c.Kubelet == nil {
		return in, fmt.Errorf("no kubelet PodResources source")
	}
	kp, err := c.Kubelet.PodDevices(ctx)
	if err != nil {
		return in, fmt.Errorf("kubelet pod resources: %w", err)
	}
	in.Kubelet = kp
	kind, ok := deviceKind(resource)
	if !ok {
		return in, fmt.Errorf("%s is not a resource the agent serves", resource)
	}
	var list slicerv1alpha1.SliceAllocationList
	if err := c.Cache.List(ctx, &list, client.MatchingLabels{slicerv1alpha1.LabelNode: c.Node}); err != nil {
		return in, fmt.Errorf("list cached allocations: %w", err)
	}
	in.Allocs = list.Items
	cached := map[types.NamespacedName]int{} // index in in.Allocs
	for i := range list.Items {
		a := &list.Items[i]
		cached[client.ObjectKeyFromObject(a)] = i
		key := a.Namespace + "/" + a.Spec.PodName
		if _, listed := kp[key]; !listed {
			continue // the kubelet is not admitting it: no candidate, no reads
		}
		if _, done := in.Pods[key]; done || !relevant(a, c.Node, resource) {
			continue
		}
		pod, err := c.pod(ctx, types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.PodName}, a.Spec.PodUID)
		if err != nil {
			return in, err
		}
		in.Pods[key] = pod
	}
	keys := make([]string, 0, len(kp))
	for key := range kp {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		ns, name, ok := strings.Cut(key, "/")
		if !ok {
			continue
		}
		pod, known := in.Pods[key]
		if !known {
			if pod, err = c.pod(ctx, types.NamespacedName{Namespace: ns, Name: name}, ""); err != nil {
				return in, err
			}
		}
		if pod == nil || pod.Spec.NodeName != c.Node {
			continue
		}
		need, err := podNeed(resource, &pod.Spec)
		if err != nil || distinct(kp[key][resource]) >= need.Count(kind) {
			continue // not admitting this resource: no reads
		}
		in.Pods[key] = pod
		for i := 0; i < need.Slices(); i++ {
			nn := types.NamespacedName{Namespace: ns, Name: slicerv1alpha1.AllocationName(pod.Name, string(pod.UID), int32(i))}
			at, have := cached[nn]
			if have && in.Allocs[at].Status.State == slicerv1alpha1.AllocationReady {
				continue
			}
			// Missing, or not Ready yet in the cache (its status may be newer in the API).
			var a slicerv1alpha1.SliceAllocation
			err := c.Live.Get(ctx, nn, &a)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return in, fmt.Errorf("get allocation %s: %w", nn, err)
			case a.Spec.NodeName != c.Node || a.Spec.PodUID != string(pod.UID):
			case have:
				in.Allocs[at] = a
			default:
				in.Allocs = append(in.Allocs, a)
			}
		}
	}
	return in, nil
}

// pod reads a pod from the cache, or with a GET when the cache does not have it (or has
// another pod of that name than uid, when uid is set). Nil: the pod does not exist.
func (c *Chooser) pod(ctx context.Context, key types.NamespacedName, uid string) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := c.Cache.Get(ctx, key, &pod)
	if err == nil && (uid == "" || string(pod.UID) == uid) {
		return &pod, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get cached pod %s: %w", key, err)
	}
	pod = corev1.Pod{}
	err = c.Live.Get(ctx, key, &pod)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get pod %s: %w", key, err)
	}
	return &pod, nil
}

// relevant reports whether a is a live allocation of this node for resource.
func relevant(a *slicerv1alpha1.SliceAllocation, node, resource string) bool {
	return a.DeletionTimestamp == nil && a.Spec.NodeName == node && a.Status.State != slicerv1alpha1.AllocationFailed &&
		resourceOf(migapi.SlotAsWritten(&a.Spec)) == resource
}

// deviceKind is the key of a served resource's devices in a podrequest.Need: the MIG profile
// (NVIDIA spelling) of slicer.dev/mig-<profile>, nvidia.com/gpu itself for whole GPUs.
func deviceKind(resource string) (string, bool) {
	if resource == migapi.NVIDIAGPUResource {
		return resource, true
	}
	return mig.ProfileNameFromResource(resource)
}

// podNeed is what a pod needs of a served resource's kind (deviceKind): its slices
// (podrequest.ForPod), or its whole GPUs (podrequest.WholeGPUNeed).
func podNeed(resource string, spec *corev1.PodSpec) (podrequest.Need, error) {
	if resource == migapi.NVIDIAGPUResource {
		return podrequest.WholeGPUNeed(spec)
	}
	return podrequest.ForPod(spec)
}

// realized reports whether a Ready allocation has its device: a MIG device, or a whole GPU.
func realized(a *slicerv1alpha1.SliceAllocation) bool {
	return a.Status.State == slicerv1alpha1.AllocationReady && (a.Spec.WholeGPU || a.Status.MIGDeviceUUID != "")
}

// preferInput is everything one preference is computed from.
type preferInput struct {
	Node, Resource string
	Allocs         []slicerv1alpha1.SliceAllocation
	// Pods by "namespace/name"; nil or missing: the pod does not exist.
	Pods map[string]*corev1.Pod
	// Kubelet is the kubelet's pod list with held devices (PodDevices).
	Kubelet                map[string]map[string][]string
	Available, MustInclude []string
	Size                   int
}

type preferCandidate struct {
	pod     string
	created time.Time
	devices []string
	// need is the pod's distinct slices of the resource (podrequest.ForPod).
	need int
	// reuses is true when a mustInclude device is one of the pod's allocations': the
	// kubelet reuses it from this pod's init container, so this is the pod it admits.
	reuses bool
}

// preferred is the chooser's rule, pure. The kubelet calls GetPreferredAllocation once per
// container that draws new devices: size is the container's devices of the resource and
// mustInclude the ones it reuses from the pod's finished init containers
// (internal/podrequest describes the kubelet's reuse rules). Candidates are pods that
//   - have a live allocation of this node for the resource that is Ready with
//     its device (its slot's device ID) in available,
//   - exist with the allocation's UID, are bound to this node, not terminal
//     nor deleting,
//   - are listed by the kubelet (it knows the pod: admitted or being
//     admitted) and hold fewer distinct devices of the resource than
//     podrequest.ForPod says they need (not yet, or not fully, admitted),
//   - have a container that receives size devices of the profile, size-len(mustInclude)
//     of them new (podrequest.ContainerNeed): the container being admitted.
//
// The pod whose allocation holds a mustInclude device is the one the kubelet admits;
// otherwise the oldest candidate (creationTimestamp, then namespace/name) is, as the
// kubelet admits the oldest first. The answer is mustInclude, then that pod's devices
// (by allocation index), then available devices no waiting pod was promised, then the
// other candidates' devices by age, then anything else available, cut at size. No
// candidate (or no kubelet list) gives nil: the kubelet chooses. It also returns the
// candidate pod ("" when none).
func preferred(in preferInput) ([]string, string) {
	if in.Kubelet == nil || in.Size <= 0 {
		return nil, ""
	}
	kind, ok := deviceKind(in.Resource)
	if !ok {
		return nil, ""
	}
	fresh := in.Size - len(in.MustInclude) // devices new to the pod the container draws
	avail := map[string]bool{}
	for _, id := range in.Available {
		avail[id] = true
	}
	must := map[string]bool{}
	for _, id := range in.MustInclude {
		must[id] = true
	}
	allocs := make([]*slicerv1alpha1.SliceAllocation, 0, len(in.Allocs))
	for i := range in.Allocs {
		if relevant(&in.Allocs[i], in.Node, in.Resource) {
			allocs = append(allocs, &in.Allocs[i])
		}
	}
	sort.Slice(allocs, func(i, j int) bool {
		if allocs[i].Spec.Index != allocs[j].Spec.Index {
			return allocs[i].Spec.Index < allocs[j].Spec.Index
		}
		return allocs[i].Namespace+"/"+allocs[i].Name < allocs[j].Namespace+"/"+allocs[j].Name
	})
	promised := map[string]bool{} // available devices some pod's allocation holds
	byPod := map[string]*preferCandidate{}
	var cands []*preferCandidate
	for _, a := range allocs {
		key := a.Namespace + "/" + a.Spec.PodName
		dev := wantFromAllocation(a).desired().DeviceID() // the device ID of its slot (writeDevices)
		if !realized(a) || !avail[dev] {
			continue
		}
		promised[dev] = true
		pod := in.Pods[key]
		if pod == nil || (a.Spec.PodUID != "" && string(pod.UID) != a.Spec.PodUID) || pod.Spec.NodeName != in.Node ||
			pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, known := in.Kubelet[key]; !known {
			continue
		}
		c := byPod[key]
		if c == nil {
			need, ok := admitting(pod, in.Resource, kind, in.Size, fresh)
			if !ok {
				continue
			}
			c = &preferCandidate{pod: key, created: pod.CreationTimestamp.Time, need: need}
			byPod[key] = c
			cands = append(cands, c)
		}
		if must[dev] {
			c.reuses = true
		} else {
			c.devices = append(c.devices, dev)
		}
	}
	// Pods that already hold all they asked for are admitted: not candidates.
	live := cands[:0]
	for _, c := range cands {
		if distinct(in.Kubelet[c.pod][in.Resource]) < c.need {
			live = append(live, c)
		}
	}
	cands = live
	if len(cands) == 0 {
		return nil, ""
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].reuses != cands[j].reuses {
			return cands[i].reuses
		}
		if !cands[i].created.Equal(cands[j].created) {
			return cands[i].created.Before(cands[j].created)
		}
		return cands[i].pod < cands[j].pod
	})

	var out []string
	seen := map[string]bool{}
	add := func(ids ...string) {
		for _, id := range ids {
			if len(out) < in.Size && !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	for _, id := range in.MustInclude {
		if !seen[id] {
			seen[id] = true
			out = append(out, id) // never cut: the kubelet must get them all
		}
	}
	add(cands[0].devices...)
	rest := append([]string(nil), in.Available...)
	sort.Strings(rest)
	for _, id := range rest {
		if !promised[id] {
			add(id)
		}
	}
	for _, c := range cands[1:] {
		add(c.devices...)
	}
	add(rest...)
	return out, cands[0].pod
}

// admitting reports whether a pod can be the one whose container the kubelet admits with
// size devices of resource (of kind, deviceKind), fresh of them new, and returns the pod's
// distinct devices of the kind. A pod whose spec Slicer cannot read is no candidate.
func admitting(pod *corev1.Pod, resource, kind string, size, fresh int) (need int, ok bool) {
	n, err := podNeed(resource, &pod.Spec)
	if err != nil || fresh <= 0 {
		return 0, false
	}
	for _, c := range n.Containers {
		if u := c.Uses[kind]; u.Total == size && u.New == fresh {
			return n.Count(kind), true
		}
	}
	return 0, false
}

// distinct counts distinct device IDs (a device a sidecar or app container reuses from an
// init container is listed once per container).
func distinct(ids []string) int {
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	return len(seen)
}
