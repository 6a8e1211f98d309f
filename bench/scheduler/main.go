// Command scheduler measures Slicer's scheduler in the style of
// scheduler_perf: fake nodes and NodeAccelerators as API objects on a real
// kube-apiserver (envtest), kube-scheduler in-process with the binary's
// wiring (scheduler/server). Each phase runs on a fresh control plane: the
// scheduler is started, synced and warmed up on a first set of pods, then
// the measured pods are created and timed until a pod watch has seen every
// one bound. Phases:
//
//	plain      plugin disabled, pods ask for example.com/gpu (NodeResourcesFit)
//	mig-sched  plugin enabled, pods ask for a MIG slice; each slice is marked
//	           Ready right after the plugin creates it (scheduling only)
//	mig-e2e    plugin enabled; the fake agent (one worker per node, the
//	           node agent's writes) marks slices Ready and reports them
//	dra-sched  Slicer's DRA frontend as the stock scheduler sees it: each node's
//	           MIG devices as ResourceSlices (migdra), DeviceClasses with
//	           extended resource names, pods ask for nvidia.com/mig-<profile>;
//	           the stock DynamicResources plugin allocates (scheduling only)
//	burst      the real node agent (emulated NVML): 56 × 1g.10gb on one
//	           8 × H100 node, created together → all Ready
//
// It prints pods/s, the ratios mig-sched/plain, mig-e2e/plain and dra-sched/plain, the
// scheduling-attempt latency, the API writes per pod by component, and the
// scheduler's heap per node and per GPU. docs/benchmarks.md has the numbers.
//
//	go run ./bench/scheduler -nodes 1000 -gpus 8 -pods 5000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/slicer-operator/slicer/internal/mig"
)

func main() {
	var p params
	flag.IntVar(&p.nodes, "nodes", 100, "fake nodes (API objects), each with a NodeAccelerator")
	flag.IntVar(&p.gpus, "gpus", 8, "H100-80GB GPUs per node")
	flag.IntVar(&p.pods, "pods", 1000, "measured pods per phase")
	flag.IntVar(&p.warmup, "warmup", -1, "warm-up pods per phase, scheduled before timing (-1: 10% of -pods)")
	flag.IntVar(&p.workers, "workers", 32, "concurrent API clients creating nodes and pods")
	flag.DurationVar(&p.realizeDelay, "realize-delay", 0, "mig-e2e: time the fake agent holds a GPU per slice before Ready (emulated NVML create time)")
	flag.DurationVar(&p.timeout, "timeout", 15*time.Minute, "per-phase limit for the pods to be bound")
	flag.BoolVar(&p.precreate, "precreate", false, "create all pods before the scheduler starts; time from the warm-up-th bind to the last")
	flag.StringVar(&p.memProfile, "memprofile", "", "write a heap profile of the first phase, taken where its heap is measured")
	flag.StringVar(&p.cpuProfile, "cpuprofile", "", "write a CPU profile of each phase's measured window to this path + \".<phase>\" (the whole process: scheduler, clients, watch)")
	profile := flag.String("profile", "1g.10gb", "MIG profile each MIG pod asks for")
	draProfiles := flag.String("dra-profiles", "", "dra-sched: publish only these profiles' devices (comma-separated NVIDIA spellings; default all)")
	phases := flag.String("phases", "plain,mig-sched,mig-e2e,burst", "phases to run, in order (plain is needed for the ratios)")
	repeat := flag.Int("repeat", 1, "run the phases this many times, interleaved (plain, mig-sched, …, plain, mig-sched, …); prints each round and the ratios' and CPU's median and spread")
	burstRounds := flag.Int("burst-rounds", 3, "burst: rounds of 56 allocations (released between rounds)")
	burstLatency := flag.Duration("burst-nvml-latency", 0, "burst: latency the emulated NVML adds to each MIG create/destroy call")
	klog.InitFlags(nil)
	flag.Parse()
	if *draProfiles != "" {
		p.draProfiles = strings.Split(*draProfiles, ",")
	}
	if p.warmup < 0 {
		p.warmup = max(1, p.pods/10)
	}
	if *repeat < 1 {
		fmt.Fprintln(os.Stderr, "error: -repeat must be at least 1")
		os.Exit(2)
	}
	if err := run(context.Background(), p, *profile, strings.Split(*phases, ","), *repeat, *burstRounds, *burstLatency); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func run(ctx context.Context, p params, profile string, phases []string, repeat, burstRounds int, burstLatency time.Duration) error {
	migRes := corev1.ResourceName(mig.ResourceName(profile))
	draRes := corev1.ResourceName(mig.NVIDIAResourceName(profile))
	specs := map[string]phaseSpec{
		"plain":     {key: "plain", name: "plain (" + plainResource + ", plugin disabled)", disabled: true, resource: plainResource},
		"mig-sched": {key: "mig-sched", name: "MIG scheduling only (" + string(migRes) + ")", resource: migRes, realize: instant},
		"mig-e2e":   {key: "mig-e2e", name: "MIG end to end, fake agent (" + string(migRes) + ")", resource: migRes, realize: viaFakeAgent},
		"dra-sched": {key: "dra-sched", name: "DRA, stock plugins (" + string(draRes) + ")", disabled: true, dra: true, resource: draRes},
	}
	fmt.Printf("bench/scheduler: %d nodes × %d H100-80GB, %d measured + %d warm-up pods per phase, realize-delay %s, precreate %v\n",
		p.nodes, p.gpus, p.pods, p.warmup, p.realizeDelay, p.precreate)
	for _, ph := range phases {
		if _, ok := specs[ph]; !ok && ph != "burst" {
			return fmt.Errorf("unknown phase %q", ph)
		}
	}
	var rounds []map[string]result
	var order []string
	var bursts []burstRound
	for round := range repeat {
		results := map[string]result{}
		order = order[:0]
		for _, ph := range phases {
			if ph == "burst" {
				if round > 0 {
					continue // its own rounds (-burst-rounds) repeat it
				}
				logf("burst: %d rounds", burstRounds)
				b, err := runBurst(ctx, burstRounds, burstLatency)
				if err != nil {
					return fmt.Errorf("burst: %w", err)
				}
				bursts = b
				continue
			}
			logf("round %d/%d, %s: starting", round+1, repeat, ph)
			p.measureHeap = round == 0 && len(order) == 0
			r, err := runPhase(ctx, p, specs[ph])
			if err != nil {
				return fmt.Errorf("phase %s: %w", ph, err)
			}
			logf("%s: %d pods in %s", ph, p.pods, r.elapsed.Round(time.Millisecond))
			results[ph] = r
			order = append(order, ph)
		}
		if repeat > 1 {
			fmt.Printf("\n--- round %d of %d\n", round+1, repeat)
		}
		printResults(p, order, results)
		rounds = append(rounds, results)
	}
	printRepeated(p, order, rounds)
	printBurst(bursts, burstLatency)
	return nil
}

func printResults(p params, order []string, results map[string]result) {
	if len(order) == 0 {
		return
	}
	fmt.Printf("\n%-52s %6s %8s %8s %8s %22s %20s %20s %12s\n", "phase", "pods", "s", "pods/s", "create s",
		"algorithm p50/p99/mean", "attempt p50/p99", "create→bound p50/p99", "PreBind wait")
	for _, k := range order {
		r := results[k]
		fmt.Printf("%-52s %6d %8.2f %8.1f %8.2f %22s %20s %20s %12s\n", r.spec.name, r.boundTotal, r.elapsed.Seconds(),
			r.podsPerSec(p.pods), r.create.Seconds(),
			fmt.Sprintf("%s / %s / %s", r.algorithm.quantileText(0.5), r.algorithm.quantileText(0.99), ms(r.algorithm.mean())),
			fmt.Sprintf("%s / %s", r.attempts.quantileText(0.5), r.attempts.quantileText(0.99)),
			fmt.Sprintf("%s / %s", ms(percentile(r.e2e, 0.5)), ms(percentile(r.e2e, 0.99))),
			ms(r.preBind.mean()))
	}
	fmt.Println("algorithm: scheduler_scheduling_algorithm_duration_seconds (PreFilter, Filter, Score of one cycle);")
	fmt.Println("attempt: scheduler_scheduling_attempt_duration_seconds{result=scheduled}, cycle start → bound (includes PreBind).")
	fmt.Println("\nAPI writes per measured pod (counting proxies: scheduler = kube-scheduler and plugin; agent = fake agent or instant realizer):")
	for _, k := range order {
		r := results[k]
		fmt.Printf("  %-10s scheduler %.2f (%s)\n", k, float64(total(r.schedW))/float64(p.pods), perPod(r.schedW, p.pods))
		fmt.Printf("  %-10s agent     %.2f (%s)\n", "", float64(total(r.agentW))/float64(p.pods), perPod(r.agentW, p.pods))
	}
	fmt.Println("\nCPU per measured pod in the measured window (apiserver, etcd: their processes; scheduler: the bench process's")
	fmt.Println("profile samples of goroutines labelled component=scheduler; process: all of the bench process):")
	for _, k := range order {
		c := results[k].cpu.perPod(p.pods)
		fmt.Printf("  %-10s apiserver %s  etcd %s  scheduler %s  process %s\n", k, ms(c.apiserver), ms(c.etcd), ms(c.scheduler), ms(c.process))
	}
	gpus := p.nodes * p.gpus
	fmt.Println("\nScheduler heap once synced and warm (after GC, minus before its start; includes the warm-up pods and the pod watch):")
	for _, k := range order {
		r := results[k]
		if r.heap < 0 {
			fmt.Printf("  %-10s not measured (only the first phase of a run, without -precreate, is: run -phases %s alone)\n", k, k)
			continue
		}
		fmt.Printf("  %-10s %8.1f MiB  %7.1f KiB/node  %6.2f KiB/GPU\n", k, float64(r.heap)/(1<<20),
			float64(r.heap)/1024/float64(p.nodes), float64(r.heap)/1024/float64(gpus))
	}
	plain, okPlain := results["plain"]
	if b, ok := results["mig-sched"]; ok && okPlain && b.heap >= 0 && plain.heap >= 0 {
		d := b.heap - plain.heap
		fmt.Printf("  plugin enabled − disabled: %.1f MiB, %.1f KiB/node, %.2f KiB/GPU\n", float64(d)/(1<<20),
			float64(d)/1024/float64(p.nodes), float64(d)/1024/float64(gpus))
	}
	if !okPlain {
		return
	}
	fmt.Println()
	for _, k := range []string{"mig-sched", "mig-e2e", "dra-sched"} {
		if r, ok := results[k]; ok {
			fmt.Printf("ratio %-9s / plain at %d nodes × %d GPUs: %.3f  (%.1f / %.1f pods/s)\n", k, p.nodes, p.gpus,
				r.podsPerSec(p.pods)/plain.podsPerSec(p.pods), r.podsPerSec(p.pods), plain.podsPerSec(p.pods))
		}
	}
	if b, ok := results["mig-sched"]; ok && b.algorithm.count > 0 && plain.algorithm.count > 0 {
		fmt.Printf("scheduling-cycle bound (plain algorithm mean / mig algorithm mean): %.3f  (%s / %s per cycle)\n",
			float64(plain.algorithm.mean())/float64(b.algorithm.mean()), ms(plain.algorithm.mean()), ms(b.algorithm.mean()))
	}
	if _, ok := results["mig-sched"]; ok {
		fmt.Println("mig-sched: each SliceAllocation is marked Ready by one status write made right after the plugin's create,")
		fmt.Println("  in its PreBind (no agent queue, no finalizer write, no NodeAccelerator report); PreBind still waits for its")
		fmt.Println("  informer to show Ready. mig-e2e: the fake agent does the node agent's writes, one worker per node.")
	}
}

func printBurst(rounds []burstRound, latency time.Duration) {
	if len(rounds) == 0 {
		return
	}
	fmt.Printf("\nBurst: real node agent, emulated NVML (+%s per MIG call), 56 × 1g.10gb on one 8 × H100-80GB node (goal ≤ 1 s):\n", latency)
	fmt.Printf("  %-5s %10s %12s %12s %14s %12s  %s\n", "round", "creates", "first Ready", "all Ready", "agent seen→Ready", "release", "agent writes per allocation")
	var all []time.Duration
	for i, b := range rounds {
		all = append(all, b.allReady)
		fmt.Printf("  %-5d %10s %12s %12s %14s %12s  %s\n", i, ms(b.created), ms(b.firstReady), ms(b.allReady),
			fmt.Sprintf("%s / %s", ms(b.realize.mean()), b.realize.quantileText(0.99)), ms(b.released), perPod(b.writes, 56))
	}
	sortDurations(all)
	fmt.Printf("  all Ready: median %s, best %s, worst %s\n", ms(all[len(all)/2]), ms(all[0]), ms(all[len(all)-1]))
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}
