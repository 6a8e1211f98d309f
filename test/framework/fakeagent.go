package framework

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
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
	// from) its node's NodeAccelerator status, as the real agent does.
	ReportSlices bool
	// CollectOrphans deletes the allocations of a pod that is gone, standing
	// in for the garbage collector that envtest does not run.
	CollectOrphans bool
	// Fail, when set, is asked for each new allocation; a non-empty answer
	// marks it Failed with that message.
	Fail func(*slicerv1alpha1.SliceAllocation) string
}

// FakeAgent plays the node agents of every node without NVML: it adds the
// agent's finalizer to each SliceAllocation, marks it Ready with a fake MIG
// device UUID, and on deletion releases it (removes the finalizer). It never
// touches spec. Scheduler, operator and e2e suites reuse it.
type FakeAgent struct {
	opts   FakeAgentOptions
	client client.Client
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	naMu   sync.Mutex // serializes NodeAccelerator status writes
}

// StartFakeAgent starts the fake agent against the apiserver of cfg.
func StartFakeAgent(ctx context.Context, cfg *rest.Config, opts FakeAgentOptions) (*FakeAgent, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     NewScheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: 4},
	})
	if err != nil {
		return nil, fmt.Errorf("fake agent manager: %w", err)
	}
	a := &FakeAgent{opts: opts, client: mgr.GetClient(), done: make(chan struct{})}
	b := ctrl.NewControllerManagedBy(mgr).Named("fake-agent").For(&slicerv1alpha1.SliceAllocation{})
	if opts.CollectOrphans {
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(a.allocationsOfPod))
	}
	if err := b.Complete(a); err != nil {
		return nil, fmt.Errorf("fake agent controller: %w", err)
	}
	ctx, a.cancel = context.WithCancel(ctx)
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
		if a.opts.ReportSlices {
			if err := a.setSlice(ctx, &sa, false); err != nil {
				return reconcile.Result{}, err
			}
		}
		if controllerutil.RemoveFinalizer(&sa, slicerv1alpha1.AllocationFinalizer) {
			if err := a.client.Update(ctx, &sa); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
		}
		return reconcile.Result{}, nil
	}
	if a.opts.CollectOrphans {
		var pod corev1.Pod
		err := a.client.Get(ctx, types.NamespacedName{Namespace: sa.Namespace, Name: sa.Spec.PodName}, &pod)
		if apierrors.IsNotFound(err) || (err == nil && string(pod.UID) != sa.Spec.PodUID) {
			return reconcile.Result{}, client.IgnoreNotFound(a.client.Delete(ctx, &sa))
		}
	}
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
			return reconcile.Result{}, client.IgnoreNotFound(a.client.Status().Update(ctx, &sa))
		}
	}
	if a.opts.ReportSlices {
		if err := a.setSlice(ctx, &sa, true); err != nil {
			return reconcile.Result{}, err
		}
	}
	sa.Status = slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationReady,
		MIGDeviceUUID: FakeMIGUUID(&sa), ObservedGeneration: sa.Generation}
	return reconcile.Result{}, client.IgnoreNotFound(a.client.Status().Update(ctx, &sa))
}

// FakeMIGUUID is the MIG device UUID the fake agent reports for an allocation.
func FakeMIGUUID(sa *slicerv1alpha1.SliceAllocation) string {
	return "MIG-" + string(sa.UID)
}

// setSlice adds or removes the allocation's slice in its NodeAccelerator status.
func (a *FakeAgent) setSlice(ctx context.Context, sa *slicerv1alpha1.SliceAllocation, present bool) error {
	a.naMu.Lock()
	defer a.naMu.Unlock()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var na slicerv1alpha1.NodeAccelerator
		if err := a.client.Get(ctx, types.NamespacedName{Name: sa.Spec.NodeName}, &na); err != nil {
			return err
		}
		for gi := range na.Status.GPUs {
			g := &na.Status.GPUs[gi]
			if g.UUID != sa.Spec.GPUUUID {
				continue
			}
			kept := g.Slices[:0]
			found := false
			for _, s := range g.Slices {
				mine := s.Allocation != nil && s.Allocation.Namespace == sa.Namespace && s.Allocation.Name == sa.Name
				found = found || mine
				if !mine || present {
					kept = append(kept, s)
				}
			}
			g.Slices = kept
			if present && !found {
				g.Slices = append(g.Slices, slicerv1alpha1.MIGSlice{Profile: sa.Spec.Profile, Placement: sa.Spec.Placement,
					MIGDeviceUUID: FakeMIGUUID(sa), State: slicerv1alpha1.SliceAllocated,
					Allocation: &slicerv1alpha1.AllocationReference{Namespace: sa.Namespace, Name: sa.Name}})
			}
		}
		return a.client.Status().Update(ctx, &na)
	})
	return client.IgnoreNotFound(err)
}
