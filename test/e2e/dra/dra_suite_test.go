// Package dra runs Slicer's DRA frontend on the local single-node cluster
// (hack/local-cluster up --default-scheduler): Slicer installed from
// config/overlays/emulated-dra (spec.frontend DRA, 2 emulated H100-80GB), no
// Slicer scheduler or webhook, pods placed by the stock kube-scheduler from the
// agent's ResourceSlices and prepared by its kubelet DRA plugin. A suite of its
// own because the Slicer is one per cluster and test/e2e installs the
// device-plugin frontend. It needs root; as any other user every spec is skipped
// with the reason printed.
package dra

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
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

var (
	repoRoot  string
	k8s       client.Client
	clientset kubernetes.Interface
)

func TestDRA(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	RunSpecs(t, "e2e: Slicer's DRA frontend on the local node")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	wd, err := os.Getwd()
	Expect(err).NotTo(HaveOccurred())
	repoRoot = filepath.Clean(filepath.Join(wd, "..", "..", ".."))
	kubeconfig := filepath.Join(repoRoot, ".local", "kubeconfig")

	if os.Geteuid() != 0 {
		skipLoudly("the DRA e2e suite needs root (the local node runs runc, overlay mounts and cgroups)")
	}
	if exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "local-cluster"), "status").Run() == nil {
		skipLoudly("a local cluster is already running (make demo?); the suite starts its own: run `make demo-down` first")
	}
	DeferCleanup(func(ctx SpecContext) {
		if os.Getenv("E2E_KEEP_CLUSTER") != "" {
			fmt.Fprintln(os.Stderr, "e2e/dra: E2E_KEEP_CLUSTER is set: the cluster stays up (KUBECONFIG="+kubeconfig+"); make demo-down stops it")
			return
		}
		runScript(ctx, nil, "hack/local-cluster", "down")
	}, NodeTimeout(3*time.Minute))

	// the stock kube-scheduler is the only scheduler: the DRA frontend runs none
	runScript(ctx, nil, "hack/local-cluster", "up", "--default-scheduler")
	runScript(ctx, []string{"SLICER_FRONTEND=DRA"}, "hack/demo", "install")

	ctrllog.SetLogger(GinkgoLogr)
	_, k8s, clientset = localnode.Connect(kubeconfig)
}, NodeTimeout(20*time.Minute))

func skipLoudly(reason string) { localnode.SkipLoudly("e2e/dra", reason) }

// runScript runs a repository script with env added to the suite's environment.
func runScript(ctx context.Context, env []string, script string, args ...string) {
	localnode.RunScript(ctx, repoRoot, env, script, args...)
}

// A failed spec leaves a digest of the cluster (pods, allocations, component errors) in the
// output and in localnode.DigestFile, whose last lines .ci/run prints.
var _ = AfterEach(func(ctx SpecContext) { localnode.ReportIfFailed(ctx, repoRoot, k8s, clientset) })
