package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

// scene is one scenario's namespace on the local node, with its pod watch.
type scene struct {
	c       client.Client
	cs      kubernetes.Interface
	ns      string
	w       *podWatch
	timeout time.Duration // for each wait of a round
}

// newScene creates the namespace ns (localnode.CreateNamespace) and starts its pod watch;
// the watch ends with ctx.
func newScene(ctx context.Context, c client.Client, cs kubernetes.Interface, ns string, timeout time.Duration) (*scene, error) {
	if err := expect(func() { localnode.CreateNamespace(ctx, c, cs, ns) }); err != nil {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	w, err := watchPods(ctx, cs, ns)
	if err != nil {
		return nil, err
	}
	return &scene{c: c, cs: cs, ns: ns, w: w, timeout: timeout}, nil
}

// close deletes the namespace and waits until it is gone.
func (s *scene) close(ctx context.Context) error {
	return expect(func() { localnode.DeleteNamespace(ctx, s.c, s.ns) })
}

// slicePod asks for one slice of profile (nvidia.com/mig-<profile>) and runs until stopped.
func (s *scene) slicePod(name, profile string) *corev1.Pod {
	return builder.Pod(s.ns, name).RestartNever().
		Container("main", builder.Limits(mig.NVIDIAResourcePrefix+profile, "1")).Shell("true" + localnode.WaitForTerm).Obj()
}

// create records the pod's creation time in the watch, then creates it.
func (s *scene) create(ctx context.Context, p *corev1.Pod) error {
	s.w.creating(p.Name)
	if err := s.c.Create(ctx, p); err != nil {
		return fmt.Errorf("create pod %s: %w", p.Name, err)
	}
	return nil
}

// running waits until each pod was seen Running.
func (s *scene) running(ctx context.Context, names ...string) error {
	for _, n := range names {
		if _, err := s.w.waitFor(ctx, n, "Running", s.timeout, isRunning); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the pods at once (grace 0) and waits until they are gone from the API and
// no SliceAllocation of theirs is left, so that the next round finds their slices free.
func (s *scene) remove(ctx context.Context, names ...string) error {
	for _, n := range names {
		p := &corev1.Pod{}
		p.Namespace, p.Name = s.ns, n
		if err := client.IgnoreNotFound(s.c.Delete(ctx, p, client.GracePeriodSeconds(0))); err != nil {
			return fmt.Errorf("delete pod %s: %w", n, err)
		}
	}
	return s.poll(ctx, fmt.Sprintf("pods %v and their allocations gone", names), func() (bool, error) {
		var l corev1.PodList
		if err := s.c.List(ctx, &l, client.InNamespace(s.ns)); err != nil {
			return false, err
		}
		for _, p := range l.Items {
			if slices.Contains(names, p.Name) {
				return false, nil
			}
		}
		allocs, err := s.allocations(ctx)
		if err != nil {
			return false, err
		}
		for _, a := range allocs {
			if slices.Contains(names, a.Spec.PodName) {
				return false, nil
			}
		}
		return true, nil
	})
}

// poll checks done every 50 ms until it holds, fails or the round's timeout passes.
func (s *scene) poll(ctx context.Context, what string, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for {
		ok, err := done()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s", what, s.timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *scene) allocations(ctx context.Context) ([]slicerv1alpha1.SliceAllocation, error) {
	var l slicerv1alpha1.SliceAllocationList
	if err := s.c.List(ctx, &l, client.InNamespace(s.ns)); err != nil {
		return nil, fmt.Errorf("list allocations: %w", err)
	}
	return l.Items, nil
}

// gpuOf is the GPU of the pod's live SliceAllocation, "" when it has none.
func (s *scene) gpuOf(ctx context.Context, pod string) (string, error) {
	allocs, err := s.allocations(ctx)
	if err != nil {
		return "", err
	}
	for _, a := range allocs {
		if a.Spec.PodName == pod && a.DeletionTimestamp == nil {
			return a.Spec.GPUUUID, nil
		}
	}
	return "", nil
}
