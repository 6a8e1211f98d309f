// Command latency prints issue 39's three latencies on the local node (real kubelet and
// containerd on loopback, Slicer installed from config/overlays/emulated on 2 × H100-80GB and
// 2 × A100-40GB emulated GPUs, defragmentation in its default Evict mode), each with its goal
// beside it. It measures; it asserts nothing about time. `make bench-latency` brings the node
// up, installs Slicer, runs this and brings the node down; docs/benchmarks.md has the numbers.
//
// Every time is when the harness's pod watch (an informer on the scenario's namespace)
// delivered the event, on this process's clock: the API's timestamps (conditions'
// lastTransitionTime, containers' startedAt) have one-second resolution. A create's time is
// taken just before the create call. Each scenario runs -rounds rounds in its own namespace:
//
//	finished  finished pod → slot reusable: a 7g.80gb pod (restartPolicy Never) ends while a
//	          second 7g.80gb pod waits Unschedulable for its H100 (the other H100 is held).
//	          From the watch seeing the first pod Succeeded to the watch seeing the second
//	          bound. Slicer's PreBind binds only once the pod's SliceAllocation is Ready (the
//	          agent has realized the slice), so bound is the slot realized for the next pod;
//	          its bound → Running (the kubelet starting its container) is printed beside and
//	          is not counted. The kubelet's delay between the container's exit and the pod's
//	          Succeeded status is not counted either (it is before the API says anything).
//	preempt   preemptor create → Running: every GPU full of low-priority pods, a
//	          high-priority 7g.80gb pod that needs one of them evicted (1 s grace period, the
//	          victim exits on SIGTERM). From just before the create call to the watch seeing
//	          the preemptor Running, the container start included.
//	defrag    defragmentation plan → pending pod Running: one replica of a 1g.10gb
//	          Deployment on each H100 (A100s full), a 7g.80gb pod that fits only if one moves.
//	          From the watch seeing the plan record (pod condition
//	          slicer.dev/DefragmentationPlan, which the scheduler writes before it evicts) on
//	          the pending pod to the watch seeing it Running, the container start included.
//
// A goal is met when every round is within it (the max, not the median).
//
//	go run ./bench/latency -rounds 5
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

// scenario is one latency, its goal on the local node (issue 39) and how it is measured.
type scenario struct {
	key, name string
	goal      time.Duration
	run       func(context.Context, *scene, int) ([]round, error)
}

var scenarios = []scenario{
	{"finished", "finished pod → slot reusable (next pod bound)", 2 * time.Second, finishedRounds},
	{"preempt", "preemptor create → Running", 10 * time.Second, preemptRounds},
	{"defrag", "defragmentation plan → pending pod Running", 15 * time.Second, defragRounds},
}

func main() {
	// A flag set of its own: the packages linked in (Ginkgo through test/e2e/localnode,
	// controller-runtime) register theirs on the global one, -kubeconfig among them.
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", ".local/kubeconfig", "the local node's kubeconfig (hack/local-cluster up writes it)")
	rounds := fs.Int("rounds", 5, "rounds of each scenario")
	only := fs.String("scenarios", "finished,preempt,defrag", "scenarios to run, in order")
	timeout := fs.Duration("timeout", 2*time.Minute, "limit of each wait within a round")
	_ = fs.Parse(os.Args[1:]) // ExitOnError: it exits on a bad flag
	if *rounds < 1 {
		fmt.Fprintln(os.Stderr, "error: -rounds must be at least 1")
		os.Exit(2)
	}
	var run []scenario
	for _, k := range strings.Split(*only, ",") {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.key == k })
		if i < 0 {
			fmt.Fprintf(os.Stderr, "error: unknown scenario %q (want finished, preempt or defrag)\n", k)
			os.Exit(2)
		}
		run = append(run, scenarios[i])
	}
	if err := runAll(context.Background(), *kubeconfig, run, *rounds, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func runAll(ctx context.Context, kubeconfig string, run []scenario, rounds int, timeout time.Duration) error {
	// localnode's helpers fail through Gomega; here a failure is an error (expect).
	gomega.RegisterFailHandler(func(message string, _ ...int) { panic(gomegaFailure(message)) })
	var c client.Client
	var cs kubernetes.Interface
	if err := expect(func() { _, c, cs = localnode.Connect(kubeconfig) }); err != nil {
		return fmt.Errorf("connect with %s: %w", kubeconfig, err)
	}
	var s slicerv1alpha1.Slicer
	if err := c.Get(ctx, client.ObjectKey{Name: "default"}, &s); err != nil {
		return fmt.Errorf("the Slicer resource (is Slicer installed? hack/demo install): %w", err)
	}
	if m := s.Spec.Defragmentation.Mode; m != slicerv1alpha1.DefragmentationEvict {
		return fmt.Errorf("spec.defragmentation.mode is %q: the defrag scenario needs Evict (the default)", m)
	}
	fmt.Printf("bench/latency: local node, %d rounds per scenario, %d CPUs, load average %s at start\n",
		rounds, runtime.NumCPU(), loadAverage())
	type summary struct {
		sc     scenario
		rounds []round
	}
	var done []summary
	for _, sc := range run {
		logf("%s: %d rounds", sc.key, rounds)
		scn, err := newScene(ctx, c, cs, "bench-latency-"+sc.key, timeout)
		if err != nil {
			return err
		}
		r, err := sc.run(ctx, scn, rounds)
		if cerr := scn.close(ctx); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", sc.key, err)
		}
		printRounds(sc, r)
		done = append(done, summary{sc, r})
	}
	fmt.Printf("\n%-48s %8s %8s %8s  %s\n", "latency", "goal", "p50", "max", "verdict")
	for _, d := range done {
		p50, mx := quantiles(d.rounds)
		verdict := "met"
		if mx > d.sc.goal {
			verdict = "NOT met"
		}
		fmt.Printf("%-48s %8s %8s %8s  %s\n", d.sc.name, secs(d.sc.goal), secs(p50), secs(mx), verdict)
	}
	fmt.Printf("load average %s at end\n", loadAverage())
	return nil
}

func printRounds(sc scenario, rounds []round) {
	fmt.Printf("\n%s (goal ≤ %s):\n", sc.name, secs(sc.goal))
	for i, r := range rounds {
		var parts []string
		for _, p := range r.parts {
			parts = append(parts, p.name+" "+secs(p.d))
		}
		fmt.Printf("  round %d  %8s   (%s)\n", i, secs(r.latency), strings.Join(parts, ", "))
	}
	p50, mx := quantiles(rounds)
	fmt.Printf("  p50 %s, max %s\n", secs(p50), secs(mx))
}

// quantiles is the median (the lower middle of an even count) and the max of the rounds.
func quantiles(rounds []round) (p50, mx time.Duration) {
	var d []time.Duration
	for _, r := range rounds {
		d = append(d, r.latency)
	}
	slices.Sort(d)
	return d[(len(d)-1)/2], d[len(d)-1]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// gomegaFailure is a failed Gomega assertion of a localnode helper.
type gomegaFailure string

// expect runs f, which asserts with Gomega, and returns its first failure as an error.
func expect(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			m, ok := r.(gomegaFailure)
			if !ok {
				panic(r)
			}
			err = errors.New(string(m))
		}
	}()
	f()
	return nil
}
