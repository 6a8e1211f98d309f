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
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/slicer-operator/slicer/test/framework"
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
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	cfg.QPS, cfg.Burst = 200, 400
	k8s, err = client.New(cfg, client.Options{Scheme: framework.NewScheme()})
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(20*time.Minute))

// skipLoudly skips every spec and says why on stderr too: `go test` without
// -v hides Ginkgo's skip messages, and a silently skipped suite looks green.
func skipLoudly(reason string) {
	fmt.Fprintf(os.Stderr, "\n*** e2e/dra SKIPPED: %s ***\n\n", reason)
	Skip(reason)
}

// runScript runs a repository script with env added to the suite's, its output
// going to the Ginkgo log; a failure fails the spec with the output's tail.
func runScript(ctx context.Context, env []string, script string, args ...string) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, script), args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err := cmd.Run()
	GinkgoWriter.Printf("$ %s %s (%s)\n%s\n", script, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String())
	l := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	Expect(err).NotTo(HaveOccurred(), "%s %s failed:\n%s", script, strings.Join(args, " "), strings.Join(l[max(0, len(l)-40):], "\n"))
}
