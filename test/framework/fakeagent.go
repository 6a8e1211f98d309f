package framework

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// FakeAgentOptions tune the FakeAgent.
type FakeAgentOptions struct {
	// ReportSlices adds each Ready slice to (and removes each released slice
	// from) its node's NodeAccelerator status, as the real agent does: the
	// changes of one node are coalesced into at most one status write per
	// ReportInterval.
	ReportSlices bool
	// ReportInterval is the shortest time between two NodeAccelerator status
	// writes of one node (zero: one second, the node agent's coalescing).
	ReportInterval time.Duration
	// CollectOrphans deletes the allocations of a pod that is gone, standing
	// in for the garbage collector that envtest does not run.
	CollectOrphans bool
	// Fail, when set, is asked for each new allocation; a non-empty answer
	// marks it Failed with that message.
	Fail func(*slicerv1alpha1.SliceAllocation) string
	// RealizeDelay is waited before an allocation is marked Ready, holding
	// its GPU (one slice at a time per GPU, as the agent's per-GPU lock
	// does): it stands in for NVML's create time. Zero: Ready on sight.
	RealizeDelay time.Duration
	// Workers is the number of allocations reconciled at once (zero: 4). A
	// benchmark sets at least one per node, so that no node waits for
	// another, as with one agent per node.
	Workers int
}

// FakeAgent plays the node agents of every node without NVML, with the API
// writes of the node agent: it adds the agent's finalizer to an allocation
// only when the scheduler did not create it with it, writes the status once
// (Ready with a fake MIG device UUID), and on deletion releases it (removes
// the finalizer). It never touches spec and emits no Event. Scheduler,
// operator and e2e suites reuse it.
type FakeAgent struct {
	opts     FakeAgentOptions
	client   client.Client
	reporter *sliceReporter
	cancel   context.CancelFunc
	done     chan struct{}
	err      error

	gpuMu sync.Mutex
	gpus  map[string]*sync.Mutex // per-GPU lock held during RealizeDelay
	// realized holds the UIDs of the allocations this agent marked Ready or
	// Failed, as the node agent knows its own slices: a reconcile on a cache
	// that has not yet seen that write does not write again.
	realized sync.Map
}

// StartFakeAgent starts the fake agent against the apiserver of cfg (a
// benchmark passes a CountingProxy's RestConfig to count its writes).
func StartFakeAgent(ctx context.Context, cfg *rest.Config, opts FakeAgentOptions) (*FakeAgent, error) {
	workers := opts.Workers
	if workers <= 0 {
		workers = 4
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     NewScheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: workers},
	})
	if err != nil {
		return nil, fmt.Errorf("fake agent manager: %w", err)
	}
	a := &FakeAgent{opts: opts, client: mgr.GetClient(), done: make(chan struct{}), gpus: map[string]*sync.Mutex{}}
	ctx, a.cancel = context.WithCancel(ctx)
	if opts.ReportSlices {
		interval := opts.ReportInterval
		if interval <= 0 {
			interval = time.Second
		}
		a.reporter = newSliceReporter(mgr.GetClient(), mgr.GetAPIReader(), interval)
	}
	b := ctrl.NewControllerManagedBy(mgr).Named("fake-agent").For(&slicerv1alpha1.SliceAllocation{})
	if opts.CollectOrphans {
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(a.allocationsOfPod))
	}
	if err := b.Complete(a); err != nil {
		a.cancel()
		return nil, fmt.Errorf("fake agent controller: %w", err)
	}
	if a.reporter != nil {
		go a.reporter.run(ctx)
	}
	go func() {
		defer close(a.done)
		a.err = mgr.Start(ctx)
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		a.cancel()
		<-a.done
		return nil, errors.Join(errors.New("fake agent cache did not sync"), a.err)
	}
	return a, nil
}

// Stop stops the fake agent.
func (a *FakeAgent) Stop() error {
	a.cancel()
	<-a.done
	if a.reporter != nil {
		a.reporter.wait()
	}
	if a.err != nil {
		return fmt.Errorf("fake agent: %w", a.err)
	}
	return nil
}

func (a *FakeAgent) allocationsOfPod(ctx context.Context, obj client.Object) []reconcile.Request {
	var list slicerv1alpha1.SliceAllocationList
	if err := a.client.List(ctx, &list, client.InNamespace(obj.GetNamespace()),
		client.MatchingLabels{slicerv1alpha1.LabelPodUID: string(obj.GetUID())}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// Reconcile realizes or releases one allocation.
func (a *FakeAgent) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var sa slicerv1alpha1.SliceAllocation
	if err := a.client.Get(ctx, req.NamespacedName, &sa); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if sa.DeletionTimestamp != nil {
		return reconcile.Result{}, a.release(ctx, &sa)
	}
	if a.opts.CollectOrphans {
		var pod corev1.Pod
		err := a.client.Get(ctx, types.NamespacedName{Namespace: sa.Namespace, Name: sa.Spec.PodName}, &pod)
		if apierrors.IsNotFound(err) || (err == nil && string(pod.UID) != sa.Spec.PodUID) {
			return reconcile.Result{}, client.IgnoreNotFound(a.client.Delete(ctx, &sa))
		}
	}
	if _, done := a.realized.Load(sa.UID); done {
		return reconcile.Result{}, nil
	}
	// The scheduler creates allocations with the finalizer; others (tests) may not.
	if controllerutil.AddFinalizer(&sa, slicerv1alpha1.AllocationFinalizer) {
		if err := a.client.Update(ctx, &sa); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if sa.Status.State == slicerv1alpha1.AllocationReady || sa.Status.State == slicerv1alpha1.AllocationFailed {
		return reconcile.Result{}, nil
	}
	if a.opts.Fail != nil {
		if msg := a.opts.Fail(&sa); msg != "" {
			sa.Status = slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationFailed,
				Reason: slicerv1alpha1.ReasonNVMLError, Message: msg, ObservedGeneration: sa.Generation}
			if err := a.client.Status().Update(ctx, &sa); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			a.realized.Store(sa.UID, struct{}{})
			return reconcile.Result{}, nil
		}
	}
	if a.opts.RealizeDelay > 0 {
		if err := a.realize(ctx, sa.Spec.GPUUUID); err != nil {
			return reconcile.Result{}, err
		}
	}
	sa.Status = slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationReady, ObservedGeneration: sa.Generation}
	if !sa.Spec.WholeGPU { // a whole GPU has no MIG device, and its NodeAccelerator no slice
		sa.Status.MIGDeviceUUID = FakeMIGUUID(&sa)
	}
	if err := a.client.Status().Update(ctx, &sa); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	a.realized.Store(sa.UID, struct{}{})
	if a.reporter != nil && !sa.Spec.WholeGPU {
		a.reporter.set(&sa, true)
	}
	return reconcile.Result{}, nil
}

// release drops the slice from the node's report and removes the finalizer.
func (a *FakeAgent) release(ctx context.Context, sa *slicerv1alpha1.SliceAllocation) error {
	if a.reporter != nil && !sa.Spec.WholeGPU {
		a.reporter.set(sa, false)
	}
	if controllerutil.RemoveFinalizer(sa, slicerv1alpha1.AllocationFinalizer) {
		if err := a.client.Update(ctx, sa); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	a.realized.Delete(sa.UID)
	return nil
}

// realize waits RealizeDelay holding the GPU, as NVML's create would.
func (a *FakeAgent) realize(ctx context.Context, gpu string) error {
	a.gpuMu.Lock()
	mu := a.gpus[gpu]
	if mu == nil {
		mu = &sync.Mutex{}
		a.gpus[gpu] = mu
	}
	a.gpuMu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	t := time.NewTimer(a.opts.RealizeDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("realize on GPU %s: %w", gpu, ctx.Err())
	}
}

// FakeMIGUUID is the MIG device UUID the fake agent reports for an allocation.
func FakeMIGUUID(sa *slicerv1alpha1.SliceAllocation) string {
	return "MIG-" + string(sa.UID)
}
