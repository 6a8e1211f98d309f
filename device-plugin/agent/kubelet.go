package agent

import (
	"context"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// KubeletDevices says which Slicer device IDs the kubelet holds as allocatable, e.g. from the
// PodResources API (podresources.Client.AllocatableDeviceIDs).
type KubeletDevices interface {
	AllocatableDeviceIDs(ctx context.Context) (map[string]bool, error)
}

// ReasonKubeletNotAdvertised: the allocation's slice exists, but the kubelet does not list
// its device yet; the allocation stays Creating until it does.
const ReasonKubeletNotAdvertised = "KubeletNotAdvertised"

// kubeletPoll is how often awaitKubelet asks the kubelet.
const kubeletPoll = 20 * time.Millisecond

// awaitKubelet holds back the Ready of the allocations that turn Ready in this reconcile
// until the kubelet lists their device as allocatable. Ready lets the scheduler bind the pod
// (PreBind waits for it), and the kubelet admits a bound pod at once: the device the agent
// has just advertised (SetDevices, sent on the plugin's ListAndWatch stream) must already be
// in the kubelet's device manager, or the kubelet rejects the pod for good
// (UnexpectedAdmissionError: no healthy devices). It waits up to opts.KubeletWait; a device
// still missing keeps its allocation Creating (reason KubeletNotAdvertised) and asks for a
// retry. Without a kubelet source, or when the kubelet cannot say, it does not hold anything
// back (the order of the writes is then all there is).
func (r *Reconciler) awaitKubelet(ctx context.Context, w world, o outcome, readyIDs map[types.NamespacedName]string) bool {
	if r.opts.Kubelet == nil {
		return false
	}
	want := map[types.NamespacedName]string{}
	for k, id := range readyIDs {
		if a := w.Allocs[k]; a != nil && a.Status.State != slicerv1alpha1.AllocationReady {
			want[k] = id
		}
	}
	if len(want) == 0 {
		return false
	}
	deadline := time.Now().Add(r.opts.KubeletWait)
	for {
		have, err := r.opts.Kubelet.AllocatableDeviceIDs(ctx)
		if err != nil {
			r.log(ctx).Error(err, "kubelet allocatable devices unavailable; marking slices Ready without the kubelet's word")
			return false
		}
		for k, id := range want {
			if have[id] {
				delete(want, k)
			}
		}
		if len(want) == 0 {
			return false
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(kubeletPoll):
		}
	}
	keys := make([]types.NamespacedName, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		o.Statuses[k] = creating(w.Allocs[k], ReasonKubeletNotAdvertised,
			fmt.Sprintf("the slice exists, but the kubelet does not list its device %s as allocatable yet", want[k]))
	}
	r.log(ctx).Info("the kubelet does not list devices yet; their allocations stay Creating", "allocations", keys, "waited", r.opts.KubeletWait)
	return true
}
