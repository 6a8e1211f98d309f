package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

const burstNode = "burst-node"

// burstRound is one burst: 56 allocations created at once → all Ready.
type burstRound struct {
	created    time.Duration // first create → last create returned
	firstReady time.Duration // first create → first Ready seen
	allReady   time.Duration // first create → last Ready seen
	released   time.Duration // deletes issued → all gone
	writes     map[string]int
	realize    hist // slicer_agent_realize_duration_seconds (agent saw → Ready)
}

// runBurst starts the real node agent (device-plugin/agent, emulated NVML,
// 8 × H100-80GB) on a fresh control plane, its traffic through a counting
// proxy, and times rounds of 56 × 1g.10gb allocations created together
// (the finalizer set, as the scheduler creates them) until all are Ready,
// from a watch.
func runBurst(ctx context.Context, rounds int, nvmlLatency time.Duration) (out []burstRound, err error) {
	env, err := framework.Start(framework.Options{WithoutExternalCRDs: true})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	proxy, err := framework.StartCountingProxy(env.Config)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, proxy.Stop()) }()
	admin, err := client.NewWithWatch(fast(env.Config), client.Options{Scheme: framework.NewScheme()})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if err := admin.Create(ctx, framework.MakeNamespace("bench")); err != nil {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	if err := admin.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: burstNode}}); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	models := make([]mig.Model, 8)
	for i := range models {
		models[i] = mig.H100_80GB
	}
	backend, err := emulated.New(emulated.Options{Node: burstNode, GPUs: models, Latency: nvmlLatency})
	if err != nil {
		return nil, fmt.Errorf("emulated NVML: %w", err)
	}
	cdiDir, err := os.MkdirTemp("", "bench-burst-cdi-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(cdiDir)) }()
	reg := prometheus.NewRegistry()
	// The agent's client goes through the proxy, so its writes are counted.
	counted := &framework.Env{Config: fast(proxy.RestConfig()), Scheme: env.Scheme}
	ra, err := counted.StartAgent(framework.AgentOptions{Node: burstNode, Library: backend, CDIDir: filepath.Join(cdiDir, "cdi"),
		OrphanGrace: time.Hour, Metrics: engine.NewMetrics(reg)}, logr.Discard())
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, ra.Stop()) }()
	if err := waitNodeReady(ctx, admin); err != nil {
		return nil, err
	}
	for r := range rounds {
		br, err := burstOnce(ctx, admin, proxy, reg, r)
		if err != nil {
			return out, err
		}
		out = append(out, br)
	}
	return out, nil
}

// waitNodeReady waits (setup, untimed) for the agent's first NodeAccelerator.
func waitNodeReady(ctx context.Context, c client.Client) error {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var na slicerv1alpha1.NodeAccelerator
		if err := c.Get(ctx, client.ObjectKey{Name: burstNode}, &na); err == nil &&
			framework.NodeConditionStatus(&na, slicerv1alpha1.ConditionReady) == metav1.ConditionTrue {
			return nil
		}
	}
	return errors.New("the agent did not publish a Ready NodeAccelerator within 2m")
}

func burstOnce(ctx context.Context, c client.WithWatch, proxy *framework.CountingProxy, reg *prometheus.Registry, round int) (burstRound, error) {
	var br burstRound
	var allocs []*slicerv1alpha1.SliceAllocation
	for g := range 8 {
		for s := int32(0); s < 7; s++ {
			name := fmt.Sprintf("r%d-g%d-s%d", round, g, s)
			a := framework.MakeSliceAllocation("bench", name).Node(burstNode).GPU(emulated.GPUUUID(burstNode, g)).
				Profile("1g.10gb", s, 1).Pod(name, fmt.Sprintf("00000000-0000-4000-8000-%012d", round*100+g*10+int(s))).Obj()
			a.Labels = map[string]string{slicerv1alpha1.LabelNode: burstNode, slicerv1alpha1.LabelPodUID: a.Spec.PodUID}
			a.Finalizers = []string{slicerv1alpha1.AllocationFinalizer}
			allocs = append(allocs, a)
		}
	}
	w, err := c.Watch(ctx, &slicerv1alpha1.SliceAllocationList{}, client.InNamespace("bench"))
	if err != nil {
		return br, fmt.Errorf("watch allocations: %w", err)
	}
	defer w.Stop()
	writesBefore := proxy.Writes()
	realizeBefore := gather(reg, "slicer_agent_realize_duration_seconds", "", "")
	start := time.Now()
	if err := parallel(len(allocs), len(allocs), func(i int) error { return c.Create(ctx, allocs[i]) }); err != nil {
		return br, fmt.Errorf("create allocations: %w", err)
	}
	br.created = time.Since(start)
	ready := map[string]bool{}
	if err := consume(w, 2*time.Minute, func(ev watch.Event, sa *slicerv1alpha1.SliceAllocation) bool {
		if sa.Status.State == slicerv1alpha1.AllocationReady && !ready[sa.Name] {
			ready[sa.Name] = true
			if len(ready) == 1 {
				br.firstReady = time.Since(start)
			}
		}
		if sa.Status.State == slicerv1alpha1.AllocationFailed {
			return true
		}
		return len(ready) == len(allocs)
	}); err != nil {
		return br, fmt.Errorf("burst round %d: %d of %d Ready: %w", round, len(ready), len(allocs), err)
	}
	if len(ready) != len(allocs) {
		return br, fmt.Errorf("burst round %d: an allocation Failed (%d of %d Ready)", round, len(ready), len(allocs))
	}
	br.allReady = time.Since(start)
	br.writes = diff(proxy.Writes(), writesBefore)
	br.realize = gather(reg, "slicer_agent_realize_duration_seconds", "", "").minus(realizeBefore)

	// Release (untimed for the goal, reported): delete all, wait until gone.
	relStart := time.Now()
	if err := parallel(len(allocs), len(allocs), func(i int) error { return c.Delete(ctx, allocs[i]) }); err != nil {
		return br, fmt.Errorf("delete allocations: %w", err)
	}
	gone := 0
	if err := consume(w, 2*time.Minute, func(ev watch.Event, _ *slicerv1alpha1.SliceAllocation) bool {
		if ev.Type == watch.Deleted {
			gone++
		}
		return gone == len(allocs)
	}); err != nil {
		return br, fmt.Errorf("burst round %d release: %d of %d gone: %w", round, gone, len(allocs), err)
	}
	br.released = time.Since(relStart)
	return br, nil
}

// consume feeds watch events to f until it returns true.
func consume(w watch.Interface, timeout time.Duration, f func(watch.Event, *slicerv1alpha1.SliceAllocation) bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("watch closed")
			}
			sa, isSA := ev.Object.(*slicerv1alpha1.SliceAllocation)
			if !isSA {
				if ev.Type == watch.Error {
					return fmt.Errorf("watch error: %v", ev.Object)
				}
				continue
			}
			if f(ev, sa) {
				return nil
			}
		case <-deadline.C:
			return fmt.Errorf("not done after %s", timeout)
		}
	}
}
