// Package olm installs, upgrades and uninstalls Slicer with Operator Lifecycle Manager v0 on
// the local single-node cluster (hack/local-cluster), the way users install it from
// OperatorHub: the released v0.1.0 bundle (hack/bundle/released/0.1.0) from a file-based
// catalog, then an upgrade to the current bundle (bundle/) while MIG pods run, then an
// uninstall through OLM. OLM (hack/olm, built into bin/olm) runs as processes, its olm and
// catalog operators each in a network namespace of its own (hack/netns-run), since they bind
// :8080 on every interface. docs/olm-testing.md describes the setup and what the test copy of
// each bundle changes. It needs root; as any other user every spec is skipped with the reason
// printed.
package olm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/test/e2e/localnode"
	"github.com/slicer-operator/slicer/test/framework"
)

const (
	releasedVersion = "0.1.0"
	// previousVersion is the version of the "previous" test bundle: the current bundle as if it
	// had been released before the current one (previousBundle).
	previousVersion = "0.1.99"
	// catalogAddr is where catalog-server serves the file-based catalog (host loopback; relayed
	// into the catalog operator's namespace by hack/netns-run).
	catalogAddr = "127.0.0.1:50051"
	apiPort     = "16443"
)

var (
	repoRoot   string
	kubeconfig string
	work       string // .local/olm: test bundles, catalogs, images, logs
	restConfig *rest.Config
	k8s        client.Client
	current    string // the current release's version (hack/bundle/release.yaml)
	catalogs   = map[string]string{}
	catalogSrv *exec.Cmd
	// fromReleased is OLM_FROM=released: the upgrade starts from the released v0.1.0 instead of
	// the "previous" bundle (docs/olm-testing.md says why that is not the default).
	fromReleased bool
	from         string            // the version the suite installs first and upgrades from
	pinned       map[string]string // the current bundle's images: tag reference -> digest
)

func TestOLM(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	RunSpecs(t, "olm: Slicer installed, upgraded and uninstalled by OLM on the local node")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	repoRoot = framework.RepoRoot()
	kubeconfig = filepath.Join(repoRoot, ".local", "kubeconfig")
	work = filepath.Join(repoRoot, ".local", "olm")

	if os.Geteuid() != 0 {
		skipLoudly("the OLM suite needs root (the local node runs runc, overlay mounts and cgroups; OLM runs in network namespaces); run `sudo make test` or `bash .ci/run` as root")
	}
	if exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "local-cluster"), "status").Run() == nil {
		skipLoudly("a local cluster is already running (make demo?); the suite starts its own: run `make demo-down` first")
	}
	switch os.Getenv("OLM_FROM") {
	case "", "previous":
		from = previousVersion
	case "released":
		fromReleased, from = true, releasedVersion
	default:
		Fail("OLM_FROM is \"previous\" (the default) or \"released\", not " + os.Getenv("OLM_FROM"))
	}
	bins := []string{"bin/olm/olm", "bin/olm/catalog", "bin/olm/catalog-server", "bin/olm/render-catalog", "bin/tools/relay", "bin/tools/mkimage"}
	if fromReleased {
		bins = append(bins, "bin/released/"+releasedVersion+"/slicer-operator")
	}
	for _, b := range bins {
		Expect(filepath.Join(repoRoot, b)).To(BeAnExistingFile(), "%s is built by `make test-e2e` (make olm-bin relay; OLM_FROM=released: released-bin)", b)
	}
	current = releaseVersion()

	Expect(os.RemoveAll(work)).To(Succeed())
	for _, d := range []string{"bundles", "catalogs", "images", "run"} {
		Expect(os.MkdirAll(filepath.Join(work, d), 0o755)).To(Succeed())
	}
	By("the component images: v" + current + " (and v" + previousVersion + ", the same binaries) from images/local.sh")
	images := map[string]string{} // version -> the directory of its archives
	versions := []string{current}
	if !fromReleased {
		versions = append(versions, previousVersion)
	}
	for _, v := range versions {
		images[v] = filepath.Join(work, "images", "v"+v)
		out := outputEnv(ctx, []string{"IMAGE_REPO=quay.io/slicer-operator", "IMAGE_TAG=v" + v, "VERSION=" + v},
			filepath.Join(repoRoot, "images", "local.sh"), images[v])
		Expect(os.WriteFile(filepath.Join(work, "images", "v"+v+".digests"), []byte(out), 0o644)).To(Succeed())
	}
	var err error
	pinned, err = readDigests(filepath.Join(work, "images", "v"+current+".digests"))
	Expect(err).NotTo(HaveOccurred())
	if fromReleased {
		images[releasedVersion] = filepath.Join(work, "images", "v"+releasedVersion)
		run(ctx, "hack/olm/images.sh", images[releasedVersion])
	}

	overlay := filepath.Join(repoRoot, "config", "overlays", "emulated", "operator.yaml")
	By("test bundles: v" + from + " and v" + current + " pinned by digest (hack/bundle -digests), each with the loopback patch of config/overlays/emulated")
	fromBundle := filepath.Join(work, "bundles", "v"+from)
	if fromReleased {
		Expect(loopbackBundle(filepath.Join(repoRoot, "hack", "bundle", "released", releasedVersion, "bundle"), fromBundle, overlay)).To(Succeed())
	} else {
		Expect(previousBundle(filepath.Join(repoRoot, "bundle"), fromBundle, current, previousVersion)).To(Succeed())
		Expect(loopbackBundle(fromBundle, fromBundle, overlay)).To(Succeed())
	}
	pinnedBundle := filepath.Join(work, "bundles", "v"+current+"-pinned")
	run(ctx, "go", "run", "./hack/bundle", "-out", pinnedBundle, "-digests", filepath.Join(work, "images", "v"+current+".digests"))
	cur := filepath.Join(work, "bundles", "v"+current)
	Expect(loopbackBundle(pinnedBundle, cur, overlay)).To(Succeed())
	By("file-based catalogs: v" + from + " alone, then v" + from + " and v" + current)
	catalogs["from"] = filepath.Join(work, "catalogs", "from")
	catalogs["both"] = filepath.Join(work, "catalogs", "both")
	run(ctx, "bin/olm/render-catalog", "-out", catalogs["from"], fromBundle)
	run(ctx, "bin/olm/render-catalog", "-out", catalogs["both"], fromBundle, cur)

	DeferCleanup(func(ctx SpecContext) {
		run(ctx, "hack/local-cluster", "down")
	}, NodeTimeout(3*time.Minute))
	listenersBefore = nonLoopbackListeners()
	run(ctx, "hack/local-cluster", "up", "--default-scheduler")
	archives, err := filepath.Glob(filepath.Join(work, "images", "*", "*.tar"))
	Expect(err).NotTo(HaveOccurred())
	for _, a := range archives {
		run(ctx, "hack/local-cluster", "load", a)
	}

	restConfig, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	k8s, err = client.New(restConfig, client.Options{Scheme: framework.NewScheme()})
	Expect(err).NotTo(HaveOccurred())

	By("OLM: its CRDs, the olm namespace, the catalog server and the olm and catalog operators")
	// stopped before the node goes down (cleanups run last-registered first)
	DeferCleanup(stopAll)
	startOLM(ctx)
}, NodeTimeout(15*time.Minute))

// startOLM applies OLM's CRDs (shipped in the operator-framework/api module hack/olm pins) and
// starts catalog-server on the host's loopback and OLM's two operators, each in its own network
// namespace with the apiserver and the catalog relayed in. The olm and catalog operators are
// stopped (TERM; hack/netns-run ends everything in their namespaces) before the node goes down.
func startOLM(ctx context.Context) {
	dir := strings.TrimSpace(output(ctx, filepath.Join(repoRoot, "hack", "olm"), "go", "list", "-m", "-f", "{{.Dir}}", "github.com/operator-framework/api"))
	crds, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(crds).NotTo(BeEmpty(), "OLM's CRDs in %s/crds", dir)
	args := []string{"apply", "--server-side"}
	for _, c := range crds {
		args = append(args, "-f", c)
	}
	kubectl(ctx, args...)
	kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	kubectl(ctx, "create", "namespace", "olm")
	if fromReleased {
		startServiceRelay(ctx)
	}
	startCatalogServer(catalogs["from"])
	runDir := filepath.Join(work, "run")
	for _, name := range []string{"olm", "catalog"} {
		args := []string{runDir, name, apiPort + "," + portOf(catalogAddr), "--",
			filepath.Join(repoRoot, "bin", "olm", name), "--namespace", "olm", "--writeStatusName="}
		if name == "olm" {
			args = append(args, "--writePackageServerStatusName=")
		}
		background(name, filepath.Join(repoRoot, "hack", "netns-run"), args...)
	}
}

// startServiceRelay makes the kubernetes Service reachable from host-network pods, the job
// kube-proxy does on a real cluster and nothing does on the local node: its ClusterIP (in the
// node's loopback Service range, 127.0.100.0/24) port 443 is relayed to the apiserver on
// 127.0.0.1:16443 (whose certificate names the ClusterIP). Slicer v0.1.0 needs it: its operator
// does not hand its apiserver address to the host-network components it renders (1940f02 added
// that later), so they dial the Service.
func startServiceRelay(ctx context.Context) {
	ip := strings.TrimSpace(kubectl(ctx, "get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}"))
	background("service-relay", filepath.Join(repoRoot, "bin", "tools", "relay"),
		"-listen", "tcp:"+ip+":443", "-to", "tcp:127.0.0.1:"+apiPort)
}

// startCatalogServer (re)starts catalog-server on catalogAddr serving dir. It reads its catalog
// once at start; a CatalogSource re-lists when its connection comes back.
func startCatalogServer(dir string) {
	if catalogSrv != nil {
		stop(catalogSrv)
	}
	catalogSrv = background("catalog-server", filepath.Join(repoRoot, "bin", "olm", "catalog-server"), "-dir", dir, "-addr", catalogAddr)
}

// background starts a long-running process with its output in run/NAME.log; stopAll stops it.
func background(name, bin string, args ...string) *exec.Cmd {
	log, err := os.OpenFile(filepath.Join(work, "run", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	Expect(cmd.Start()).To(Succeed(), "start %s", name)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	procs[cmd] = done
	return cmd
}

var procs = map[*exec.Cmd]chan struct{}{}

// stopAll stops every process background started (TERM, then KILL after 10 s).
func stopAll() {
	for cmd := range procs {
		stop(cmd)
	}
}

func stop(cmd *exec.Cmd) {
	done, ok := procs[cmd]
	if !ok {
		return
	}
	delete(procs, cmd)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func portOf(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }

func releaseVersion() string {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "hack", "bundle", "release.yaml"))
	Expect(err).NotTo(HaveOccurred())
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	Fail("hack/bundle/release.yaml has no version")
	return ""
}

// run runs a repository command (path relative to the root) to completion; a failure fails the
// spec with the output's tail.
func run(ctx context.Context, name string, args ...string) string {
	bin := name
	if !filepath.IsAbs(bin) && strings.Contains(bin, "/") {
		bin = filepath.Join(repoRoot, name)
	}
	return output(ctx, repoRoot, bin, args...)
}

func kubectl(ctx context.Context, args ...string) string {
	return run(ctx, filepath.Join(repoRoot, "bin", "k8s", "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

func output(ctx context.Context, dir, bin string, args ...string) string {
	return outputIn(ctx, dir, nil, bin, args...)
}

// outputEnv is output in the repository root with env added to the environment.
func outputEnv(ctx context.Context, env []string, bin string, args ...string) string {
	return outputIn(ctx, repoRoot, env, bin, args...)
}

func outputIn(ctx context.Context, dir string, env []string, bin string, args ...string) string {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = &out
	cmd.Stderr = &errb
	start := time.Now()
	err := cmd.Run()
	GinkgoWriter.Printf("$ %s %s (%s)\n%s%s\n", bin, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String(), errb.String())
	Expect(err).NotTo(HaveOccurred(), "%s %s failed:\n%s", bin, strings.Join(args, " "), localnode.Tail(out.String()+errb.String(), 40))
	return out.String()
}

func skipLoudly(reason string) { localnode.SkipLoudly("olm", reason) }
