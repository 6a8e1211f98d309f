package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// podCheckInterval is how often PreBind's wait looks whether the pod is gone.
const podCheckInterval = time.Second

// preBindPreFlight is PreBindPreFlight's answer, whatever signature the
// framework of the minor being built gives it (prebind_preflight*.go): Skip
// when the pod asked for no slice, so the framework need not call PreBind.
func preBindPreFlight(cs fwk.CycleState) *fwk.Status {
	if _, err := cs.Read(stateKey); err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// PreBind commits the reservation: it creates the pod's SliceAllocations
// (the only API write of the plugin; an identical existing one is success),
// then waits, bounded, until the agent reports every slice Ready so the
// kubelet sees the device when the pod arrives. On failure it returns an
// error and the framework calls Unreserve.
func (p *Plugin) PreBind(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	if _, err := cs.Read(stateKey); err != nil {
		return nil // no slice asked for (PreBindPreFlight is not always consulted)
	}
	if err := p.preBind(ctx, pod, nodeName); err != nil {
		p.mu.Lock()
		p.prebindFailed[pod.UID] = true
		p.mu.Unlock()
		return fwk.AsStatus(err)
	}
	return nil
}

func (p *Plugin) preBind(ctx context.Context, pod *corev1.Pod, nodeName string) error {
	log := klog.FromContext(ctx)
	r := p.cache.Reservation(pod.UID)
	if r == nil {
		return fmt.Errorf("pod %s/%s has no slice reservation", pod.Namespace, pod.Name)
	}
	if r.NodeName != nodeName {
		return fmt.Errorf("pod %s/%s reserved slices on %s, not %s", pod.Namespace, pod.Name, r.NodeName, nodeName)
	}
	names := make([]string, 0, len(r.Slots))
	for _, s := range r.Slots {
		want := allocationFor(pod, nodeName, s)
		if err := p.create(ctx, want); err != nil {
			return err
		}
		// It exists now: its slot stays taken in the snapshot until the informer
		// shows it, even if the reservation goes first (snapshot.Cache.Created).
		p.cache.Created(pod.UID, s.Index)
		names = append(names, want.Name)
	}
	p.cache.Commit(pod.UID)
	log.V(2).Info("slice allocations committed", "pod", klog.KObj(pod), "node", nodeName, "allocations", names)

	start := time.Now()
	err := p.waitReady(ctx, pod, names)
	p.metrics.PreBindWait.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	if p.hooks.AfterPreBind != nil {
		if err := p.hooks.AfterPreBind(ctx, pod); err != nil {
			return err
		}
	}
	return nil
}

// create creates the allocation; one that already exists with the same spec
// (a restart between PreBind and Bind) is success, any other is a conflict.
func (p *Plugin) create(ctx context.Context, want *slicerv1alpha1.SliceAllocation) error {
	err := p.client.Create(ctx, want.DeepCopy())
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create slice allocation %s/%s: %w", want.Namespace, want.Name, err)
	}
	var have slicerv1alpha1.SliceAllocation
	if err := p.client.Get(ctx, client.ObjectKeyFromObject(want), &have); err != nil {
		return fmt.Errorf("read existing slice allocation %s/%s: %w", want.Namespace, want.Name, err)
	}
	if have.DeletionTimestamp != nil {
		return fmt.Errorf("slice allocation %s/%s is still being released", want.Namespace, want.Name)
	}
	if !apiequality.Semantic.DeepEqual(have.Spec, want.Spec) {
		return fmt.Errorf("slice allocation %s/%s exists with another spec (%s): conflict",
			want.Namespace, want.Name, migapi.SlotAsWritten(&have.Spec))
	}
	return nil
}

var errSliceFailed = errors.New("slice failed")

// waitReady returns once the cache shows every named allocation Ready, or an
// error when one Failed, the pod is gone, or the timeout passes. It wakes on a
// change of this pod's allocations only (Cache.PodChanged), and every
// podCheckInterval to look whether the pod is gone.
func (p *Plugin) waitReady(ctx context.Context, pod *corev1.Pod, names []string) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	tick := time.NewTicker(podCheckInterval)
	defer tick.Stop()
	for {
		changed := p.cache.PodChanged(pod.UID) // before the read, so no change is missed
		done, err := allReady(p.cache.PodAllocations(pod.UID), names)
		if err != nil || done {
			return err
		}
		if p.podGone(pod) {
			return fmt.Errorf("pod %s/%s was deleted while its slices were being created", pod.Namespace, pod.Name)
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("slices of pod %s/%s not Ready within %s: %w", pod.Namespace, pod.Name, p.timeout, context.Cause(ctx))
		}
	}
}

func allReady(have []*snapshot.Allocation, names []string) (bool, error) {
	byName := make(map[string]*snapshot.Allocation, len(have))
	for _, a := range have {
		byName[a.Name] = a
	}
	ready := true
	for _, n := range names {
		a := byName[n]
		switch {
		case a == nil:
			ready = false
		case a.Deleting:
			return false, fmt.Errorf("slice allocation %s is being deleted", n)
		case a.State == slicerv1alpha1.AllocationFailed:
			return false, fmt.Errorf("%w: allocation %s: %s: %s", errSliceFailed, n, a.Reason, a.Message)
		case a.State != slicerv1alpha1.AllocationReady:
			ready = false
		}
	}
	return ready, nil
}

// PostBind drops the reservation: the committed allocations now hold the
// slices in the snapshot.
func (p *Plugin) PostBind(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	p.mu.Lock()
	delete(p.prebindFailed, pod.UID)
	delete(p.rejected, pod.UID)
	p.mu.Unlock()
	p.defrag.forget(pod.UID)
	p.held.forget(pod.UID, "")
	p.cache.Unreserve(pod.UID)
}
