// Command scheduler measures Slicer's scheduler in the style of
// scheduler_perf: fake nodes and NodeAccelerators as API objects on a real
// kube-apiserver (envtest), the scheduler in-process (the binary's wiring),
// a fake agent marking allocations Ready. In one run it schedules the same
// number of pods twice: with the SlicerMIG plugin disabled (pods asking for
// a plain extended resource) and enabled (pods asking for a MIG slice), and
// prints pods/s, the per-attempt latency, the API writes per pod and the
// throughput ratio.
//
//	go run ./bench/scheduler -nodes 1000 -gpus 8 -pods 5000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/scheduler/server"
	"github.com/slicer-operator/slicer/test/framework"
)

const plainResource = "example.com/gpu"

type result struct {
	name        string
	pods        int
	elapsed     time.Duration
	attempts    float64
	attemptMean time.Duration
	writes      map[string]int
}

func main() {
	nodes := flag.Int("nodes", 100, "fake nodes")
	gpus := flag.Int("gpus", 8, "H100-80GB GPUs per node")
	pods := flag.Int("pods", 1000, "pods per phase")
	profile := flag.String("profile", "1g.10gb", "MIG profile each pod asks for")
	workers := flag.Int("workers", 32, "concurrent API clients creating objects")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*nodes, *gpus, *pods, *profile, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(nodes, gpus, pods int, profile string, workers int) error {
	ctx := context.Background()
	env, err := framework.Start(framework.Options{WithoutExternalCRDs: true,
		APIServerArgs: map[string]string{"max-requests-inflight": "2000", "max-mutating-requests-inflight": "1000"}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	env.Config.QPS, env.Config.Burst = 5000, 10000
	c, err := client.New(env.Config, client.Options{Scheme: framework.NewScheme()})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	proxy, err := framework.StartCountingProxy(env.Config)
	if err != nil {
		return err
	}
	defer func() { _ = proxy.Stop() }()
	dir, err := os.MkdirTemp("", "bench-scheduler-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := proxy.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	agent, err := framework.StartFakeAgent(ctx, env.Config, framework.FakeAgentOptions{})
	if err != nil {
		return err
	}
	defer func() { _ = agent.Stop() }()

	start := time.Now()
	perNode := gpus * 7
	if err := parallel(nodes, workers, func(i int) error {
		name := fmt.Sprintf("node-%05d", i)
		n := framework.MakeNode(name, nil)
		n.Status.Capacity[plainResource] = *resource.NewQuantity(int64(perNode), resource.DecimalSI)
		n.Status.Allocatable[plainResource] = *resource.NewQuantity(int64(perNode), resource.DecimalSI)
		if err := framework.CreateNode(ctx, c, n); err != nil {
			return err
		}
		return framework.CreateNodeAccelerator(ctx, c, framework.MakeNodeAccelerator(name).GPUs("H100-80GB", gpus).Obj())
	}); err != nil {
		return err
	}
	fmt.Printf("setup: %d nodes × %d GPUs created in %s\n", nodes, gpus, time.Since(start).Round(time.Millisecond))

	var results []result
	for _, phase := range []struct {
		name     string
		disabled bool
		res      corev1.ResourceName
	}{
		{"plugin disabled (" + plainResource + ")", true, plainResource},
		{"plugin enabled (" + mig.ResourceName(profile) + ")", false, corev1.ResourceName(mig.ResourceName(profile))},
	} {
		r, err := runPhase(ctx, c, proxy, kubeconfig, dir, phase.name, phase.disabled, phase.res, pods, workers)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	fmt.Printf("\n%-45s %8s %10s %10s %16s  %s\n", "phase", "pods", "seconds", "pods/s", "attempt mean", "API writes per pod")
	for _, r := range results {
		fmt.Printf("%-45s %8d %10.2f %10.1f %16s  %s\n", r.name, r.pods, r.elapsed.Seconds(),
			float64(r.pods)/r.elapsed.Seconds(), r.attemptMean.Round(time.Microsecond), perPod(r.writes, r.pods))
	}
	ratio := (float64(results[1].pods) / results[1].elapsed.Seconds()) / (float64(results[0].pods) / results[0].elapsed.Seconds())
	fmt.Printf("\nthroughput ratio (enabled / disabled) at %d nodes × %d GPUs: %.3f\n", nodes, gpus, ratio)
	return nil
}

func runPhase(ctx context.Context, c client.Client, proxy *framework.CountingProxy, kubeconfig, dir, name string,
	disabled bool, res corev1.ResourceName, pods, workers int) (result, error) {
	ns := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	if err := c.Create(ctx, framework.MakeNamespace(ns)); err != nil {
		return result{}, fmt.Errorf("namespace: %w", err)
	}
	// Pods first, scheduler second: the measure is the scheduler's, not the creator's.
	if err := parallel(pods, workers, func(i int) error {
		q := corev1.ResourceList{res: resource.MustParse("1")}
		return c.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p-%06d", i)},
			Spec: corev1.PodSpec{SchedulerName: config.DefaultSchedulerName,
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/cuda:1",
					Resources: corev1.ResourceRequirements{Limits: q, Requests: q}}}},
		})
	}); err != nil {
		return result{}, err
	}
	data, err := config.Render(config.Options{Kubeconfig: kubeconfig, DisablePlugin: disabled, QPS: 5000, Burst: 10000})
	if err != nil {
		return result{}, err
	}
	file := filepath.Join(dir, ns+".yaml")
	if err := framework.WriteFile(file, data); err != nil {
		return result{}, err
	}
	countBefore, sumBefore := attemptHistogram()
	algCountBefore, algSumBefore := histogram(legacyregistry.DefaultGatherer, "scheduler_scheduling_algorithm_duration_seconds", "", "")
	writesBefore := proxy.Writes()
	start := time.Now()
	reg := prometheus.NewRegistry()
	sched, err := server.Start(ctx, file, plugin.Options{Registerer: reg})
	if err != nil {
		return result{}, err
	}
	for {
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return result{}, fmt.Errorf("list pods: %w", err)
		}
		bound := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		if bound == pods {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if err := sched.Stop(); err != nil {
		return result{}, err
	}
	countAfter, sumAfter := attemptHistogram()
	algCount, algSum := histogram(legacyregistry.DefaultGatherer, "scheduler_scheduling_algorithm_duration_seconds", "", "")
	if n := algCount - algCountBefore; n > 0 {
		r0 := (algSum - algSumBefore) / n
		fmt.Printf("%s: scheduling algorithm (PreFilter+Filter+Score) mean %s over %.0f cycles\n", name,
			time.Duration(r0*float64(time.Second)).Round(time.Microsecond), n)
	}
	if n, sum := histogram(reg, "slicer_scheduler_prebind_wait_seconds", "", ""); n > 0 {
		fmt.Printf("%s: PreBind wait for Ready mean %s over %.0f pods\n", name, time.Duration(sum/n*float64(time.Second)).Round(time.Microsecond), n)
	}
	writes := map[string]int{}
	for k, v := range proxy.Writes() {
		if d := v - writesBefore[k]; d > 0 {
			writes[k] = d
		}
	}
	r := result{name: name, pods: pods, elapsed: elapsed, attempts: countAfter - countBefore, writes: writes}
	if r.attempts > 0 {
		r.attemptMean = time.Duration((sumAfter - sumBefore) / r.attempts * float64(time.Second))
	}
	return r, nil
}

// attemptHistogram reads kube-scheduler's scheduling-attempt histogram
// (count, sum in seconds) from the legacy registry.
func attemptHistogram() (float64, float64) {
	return histogram(legacyregistry.DefaultGatherer, "scheduler_scheduling_attempt_duration_seconds", "result", "scheduled")
}

// histogram sums the count and sum of a histogram's series whose label
// key has value (key "" for all series).
func histogram(g prometheus.Gatherer, name, key, value string) (float64, float64) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, 0
	}
	var count, sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil && (key == "" || label(m, key) == value) {
				count += float64(h.GetSampleCount())
				sum += h.GetSampleSum()
			}
		}
	}
	return count, sum
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func perPod(writes map[string]int, pods int) string {
	keys := make([]string, 0, len(writes))
	for k := range writes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, float64(writes[k])/float64(pods)))
	}
	return strings.Join(parts, " ")
}

func parallel(n, workers int, f func(int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	ch := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		ch <- i
	}
	close(ch)
	wg.Wait()
	return first
}
