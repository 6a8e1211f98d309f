package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/scheduler/server"
	"github.com/slicer-operator/slicer/test/framework"
)

// realization says who marks the MIG pods' slices Ready in a phase.
type realization int

const (
	noSlices     realization = iota // plain pods: no SliceAllocation
	instant                         // instantRealizer, in the plugin's PreBind
	viaFakeAgent                    // the fake agent, a controller with a worker per node
)

type phaseSpec struct {
	key, name string
	disabled  bool // SlicerMIG plugin disabled (NodeResourcesFit decides)
	resource  corev1.ResourceName
	realize   realization
	// dra publishes each node's MIG devices as ResourceSlices and installs the DeviceClasses
	// (migdra), as Slicer's DRA frontend does; pods ask for resource through the
	// extended-resource bridge and the stock DynamicResources plugin allocates a device.
	dra bool
}

type params struct {
	nodes, gpus, pods, warmup, workers int
	realizeDelay                       time.Duration
	timeout                            time.Duration
	// precreate creates every pod before the scheduler starts: the queue is
	// full, pod creation does not compete with the measured window, and the
	// window runs from the warmup-th bind to the last one.
	precreate bool
	// measureHeap is set for the first phase of the process only: a later
	// phase's heap delta is skewed by what earlier phases leave behind
	// until it is collected (stopped informers, connections).
	measureHeap bool
	// memProfile, when set, receives a heap profile where the heap is measured.
	memProfile string
	// cpuProfile, when set, is the path prefix of each phase's CPU profile.
	cpuProfile string
	// draProfiles, when set, limits dra-sched's published devices to these profiles.
	draProfiles []string
}

type result struct {
	spec       phaseSpec
	setup      time.Duration
	create     time.Duration // creating the measured pods
	elapsed    time.Duration // first measured create → last measured pod bound
	attempts   hist          // scheduler_scheduling_attempt_duration_seconds{result=scheduled}
	algorithm  hist          // scheduler_scheduling_algorithm_duration_seconds
	preBind    hist          // slicer_scheduler_prebind_wait_seconds
	e2e        []time.Duration
	schedW     map[string]int
	agentW     map[string]int
	heap       int64 // scheduler heap once synced and warm, minus before its start (-1: not measured)
	boundTotal int
	cpu        cpuUse // spent in the measured window (cpu.go)
}

func (r result) podsPerSec(pods int) float64 { return float64(pods) / r.elapsed.Seconds() }

// runPhase runs one phase on a fresh control plane.
func runPhase(ctx context.Context, p params, spec phaseSpec) (res result, err error) {
	res.spec = spec
	cl, err := startCluster(ctx, p.nodes, p.gpus, p.workers, spec.dra, p.draProfiles)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, cl.stop()) }()
	res.setup = cl.setup
	logf("%s: %d nodes × %d GPUs created in %s", spec.key, p.nodes, p.gpus, cl.setup.Round(time.Millisecond))
	if spec.dra {
		logf("%s: published %v", spec.key, poolShape.Load())
	}

	if spec.realize == viaFakeAgent {
		agent, err := framework.StartFakeAgent(ctx, cl.agentConfig(), framework.FakeAgentOptions{
			ReportSlices: true, RealizeDelay: p.realizeDelay, Workers: p.nodes})
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, agent.Stop()) }()
	}
	ns := "bench"
	if err := cl.admin.Create(ctx, framework.MakeNamespace(ns)); err != nil {
		return res, fmt.Errorf("namespace: %w", err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	bw, err := startBoundWatch(watchCtx, cl.cs, ns)
	if err != nil {
		return res, err
	}

	opts := plugin.Options{Registerer: prometheus.NewRegistry()}
	preBindReg := opts.Registerer.(*prometheus.Registry)
	if spec.realize == instant {
		pc := fast(cl.schedProxy.RestConfig())
		pc.ContentType = "application/json"
		inner, err := client.New(pc, client.Options{Scheme: plugin.NewScheme()})
		if err != nil {
			return res, fmt.Errorf("plugin client: %w", err)
		}
		realizer, err := client.New(cl.agentConfig(), client.Options{Scheme: plugin.NewScheme()})
		if err != nil {
			return res, fmt.Errorf("realizer client: %w", err)
		}
		opts.Client = instantRealizer{Client: inner, realizer: realizer}
	}
	data, err := config.Render(config.Options{Kubeconfig: cl.kubeconfig, DisablePlugin: spec.disabled, QPS: 5000, Burst: 10000})
	if err != nil {
		return res, err
	}
	file := filepath.Join(cl.dir, "scheduler.yaml")
	if err := framework.WriteFile(file, data); err != nil {
		return res, err
	}

	if p.precreate {
		if err := createPods(ctx, cl.admin, bw, ns, "w-", p.warmup, spec.resource, p.workers); err != nil {
			return res, err
		}
		if err := createPods(ctx, cl.admin, bw, ns, "p-", p.pods, spec.resource, p.workers); err != nil {
			return res, err
		}
	}
	heapBefore := heapAfterGC()
	// server.Start returns once the plugin's snapshot has synced; the
	// scheduler's own informers have synced once it binds the warm-up pods.
	var sched *server.Scheduler
	withSchedulerLabels(ctx, func(ctx context.Context) { sched, err = server.Start(ctx, file, opts) })
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, sched.Stop()) }()
	if !p.precreate {
		if err := createPods(ctx, cl.admin, bw, ns, "w-", p.warmup, spec.resource, p.workers); err != nil {
			return res, err
		}
	}
	if err := bw.wait(ctx, p.warmup, p.timeout); err != nil {
		return res, fmt.Errorf("%s warm-up: %w", spec.key, err)
	}
	res.heap = -1
	if p.measureHeap && !p.precreate { // with -precreate a GC here would fall in the measured window
		res.heap = int64(heapAfterGC()) - int64(heapBefore)
		if p.memProfile != "" {
			if err := writeHeapProfile(p.memProfile); err != nil {
				return res, err
			}
		}
	}

	attemptsBefore := gather(legacyregistry.DefaultGatherer, "scheduler_scheduling_attempt_duration_seconds", "result", "scheduled")
	algBefore := gather(legacyregistry.DefaultGatherer, "scheduler_scheduling_algorithm_duration_seconds", "", "")
	preBindBefore := gather(preBindReg, "slicer_scheduler_prebind_wait_seconds", "", "")
	schedBefore, agentBefore := cl.schedProxy.Writes(), cl.agentProxy.Writes()

	profilePath := ""
	if p.cpuProfile != "" {
		profilePath = p.cpuProfile + "." + spec.key
	}
	meter, err := startCPUMeter(profilePath)
	if err != nil {
		return res, err
	}
	metering := true
	defer func() {
		if metering {
			_, merr := meter.stop()
			err = errors.Join(err, merr)
		}
	}()
	start := time.Now()
	if p.precreate {
		start = bw.nthBound(p.warmup)
	} else {
		if err := createPods(ctx, cl.admin, bw, ns, "p-", p.pods, spec.resource, p.workers); err != nil {
			return res, err
		}
		res.create = time.Since(start)
	}
	if err := bw.wait(ctx, p.warmup+p.pods, p.timeout); err != nil {
		return res, fmt.Errorf("%s: %w", spec.key, err)
	}
	metering = false
	if res.cpu, err = meter.stop(); err != nil {
		return res, err
	}
	var last time.Time
	res.e2e, last = bw.latencies("p-")
	res.elapsed = last.Sub(start)
	res.boundTotal = len(res.e2e)
	if p.precreate {
		res.elapsed = bw.nthBound(p.warmup + p.pods).Sub(start)
		res.e2e = nil // queued before the scheduler started: not a latency
	}

	res.attempts = gather(legacyregistry.DefaultGatherer, "scheduler_scheduling_attempt_duration_seconds", "result", "scheduled").minus(attemptsBefore)
	res.algorithm = gather(legacyregistry.DefaultGatherer, "scheduler_scheduling_algorithm_duration_seconds", "", "").minus(algBefore)
	res.preBind = gather(preBindReg, "slicer_scheduler_prebind_wait_seconds", "", "").minus(preBindBefore)
	res.schedW = diff(cl.schedProxy.Writes(), schedBefore)
	res.agentW = diff(cl.agentProxy.Writes(), agentBefore)
	return res, nil
}

// createPods creates n pods named prefix+index asking for one res each.
func createPods(ctx context.Context, c client.Client, bw *boundWatch, ns, prefix string, n int,
	res corev1.ResourceName, workers int) error {
	return parallel(n, workers, func(i int) error {
		q := corev1.ResourceList{res: resource.MustParse("1")}
		name := fmt.Sprintf("%s%06d", prefix, i)
		bw.markCreated(name)
		err := c.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{SchedulerName: config.DefaultSchedulerName,
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/cuda:1",
					Resources: corev1.ResourceRequirements{Limits: q, Requests: q}}}},
		})
		if err != nil {
			return fmt.Errorf("create pod %s: %w", name, err)
		}
		return nil
	})
}
