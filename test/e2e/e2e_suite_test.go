// Package e2e runs the whole stack as pods on the local single-node cluster
// (hack/local-cluster): Slicer installed from config/overlays/emulated with
// emulated GPUs, a real kubelet, containerd with CDI, and runc. It needs root;
// as any other user every spec is skipped with the reason printed.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

var (
	repoRoot   string
	kubeconfig string
	restConfig *rest.Config
	k8s        client.Client
	clientset  kubernetes.Interface
	latency    = newLatencyLog()
	hostBefore hostSnapshot
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	RunSpecs(t, "e2e: Slicer as pods on the local node")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	wd, err := os.Getwd()
	Expect(err).NotTo(HaveOccurred())
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	kubeconfig = filepath.Join(repoRoot, ".local", "kubeconfig")

	if os.Geteuid() != 0 {
		skipLoudly("the e2e suite needs root (the local node runs runc, overlay mounts and cgroups); run `sudo make test` or `bash .ci/run` as root")
	}
	if exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "local-cluster"), "status").Run() == nil {
		skipLoudly("a local cluster is already running (make demo?); the suite starts its own: run `make demo-down` first")
	}

	hostBefore = takeHostSnapshot()
	DeferCleanup(func(ctx SpecContext) {
		if os.Getenv("E2E_KEEP_CLUSTER") != "" {
			fmt.Fprintln(os.Stderr, "e2e: E2E_KEEP_CLUSTER is set: the cluster stays up (KUBECONFIG="+kubeconfig+"); make demo-down stops it")
			return
		}
		runScript(ctx, "hack/local-cluster", "down")
		// demo-down's promise: no process, mount, cgroup, sysctl or path change left behind
		Expect(takeHostSnapshot().diff(hostBefore)).To(BeEmpty(), "the host after `hack/local-cluster down` differs from before `up`")
	}, NodeTimeout(3*time.Minute))

	runScript(ctx, "hack/local-cluster", "up", "--default-scheduler")
	runScript(ctx, "hack/demo", "install")

	restConfig, k8s, clientset = localnode.Connect(kubeconfig)
	// The latency watch outlives this node's context: it runs until the suite ends.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	DeferCleanup(stopWatch)
	Expect(latency.start(watchCtx, restConfig)).To(Succeed())
}, NodeTimeout(20*time.Minute))

// A failed spec leaves a digest of the cluster (pods, allocations, component errors) in the
// output and in localnode.DigestFile, whose last lines .ci/run prints.
var _ = AfterEach(func(ctx SpecContext) { localnode.ReportIfFailed(ctx, repoRoot, k8s, clientset) })

var _ = AfterSuite(func() {
	if report := latency.report(); report != "" {
		fmt.Fprintln(os.Stdout, report)
		out := os.Getenv("E2E_LATENCY_OUT")
		if out == "" {
			out = filepath.Join(repoRoot, ".local", "e2e-latency.md")
		}
		if err := os.WriteFile(out, []byte(report+"\n"), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: writing %s: %v\n", out, err)
		}
	}
})

func skipLoudly(reason string) { localnode.SkipLoudly("e2e", reason) }

func runScript(ctx context.Context, script string, args ...string) {
	localnode.RunScript(ctx, repoRoot, nil, script, args...)
}
