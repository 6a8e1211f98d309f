// Package scheduler_test runs Slicer's scheduler (kube-scheduler with the
// SlicerMIG plugin, the binary's wiring) in-process against a real
// kube-apiserver. Nodes and NodeAccelerators are API objects; a fake agent
// (test/framework) marks allocations Ready. Every scenario ends by checking
// invariants I1, I3 and I8 (docs/design/invariants.md).
package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/discovery"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/scheduler/server"
	"github.com/slicer-operator/slicer/test/framework"
	"github.com/slicer-operator/slicer/test/suite"
)

var (
	env   *framework.Env
	k8s   client.Client
	proxy *framework.CountingProxy
	agent *framework.FakeAgent
	dir   string
	ctx   = context.Background()
)

func TestScheduler(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Scheduler integration suite")
}

var _ = BeforeSuite(func() {
	env = suite.Start(framework.Options{WithoutExternalCRDs: true})
	// Each minor's scheduler build runs against an apiserver of its own minor
	// (make test-minors, docs/design/k8s-minors.md); another one means the
	// wrong KUBEBUILDER_ASSETS.
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	sv, err := dc.ServerVersion()
	Expect(err).NotTo(HaveOccurred())
	Expect(sv.Major+"."+strings.TrimSuffix(sv.Minor, "+")).To(Equal(builtKubeMinor()), "kube-apiserver %s", sv.GitVersion)
	k8s = env.Client
	proxy, err = framework.StartCountingProxy(env.Config)
	Expect(err).NotTo(HaveOccurred())
	dir, err = os.MkdirTemp("", "slicer-scheduler-it-")
	Expect(err).NotTo(HaveOccurred())
	Expect(proxy.WriteKubeconfig(filepath.Join(dir, "kubeconfig"))).To(Succeed())
	agent, err = framework.StartFakeAgent(ctx, env.Config, framework.FakeAgentOptions{ReportSlices: true, CollectOrphans: true})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if agent != nil {
		Expect(agent.Stop()).To(Succeed())
	}
	if proxy != nil {
		Expect(proxy.Stop()).To(Succeed())
	}
	Expect(os.RemoveAll(dir)).To(Succeed())
})

// builtKubeMinor is the minor ("1.35") of the k8s.io/kubernetes this test
// binary, and so the scheduler in it, was built with: the version in the
// module cache path of a kube-scheduler function's source (test binaries
// carry no module list in their build info; under -trimpath the path names
// a replaced module by its required version, so the check needs no -trimpath,
// which the Makefile's test targets do not set).
func builtKubeMinor() string {
	GinkgoHelper()
	pc := reflect.ValueOf(app.NewSchedulerCommand).Pointer()
	file, _ := runtime.FuncForPC(pc).FileLine(pc)
	m := regexp.MustCompile(`k8s\.io/kubernetes@v(\d+\.\d+)\.`).FindStringSubmatch(filepath.ToSlash(file))
	Expect(m).NotTo(BeNil(), "no k8s.io/kubernetes version in %s", file)
	return m[1]
}

// running is an in-process scheduler and its plugin.
type running struct {
	sched  *server.Scheduler
	plugin *plugin.Plugin
	reg    *prometheus.Registry
}

// startScheduler starts a scheduler with the rendered configuration; its
// API traffic goes through the counting proxy.
func startScheduler(sctx context.Context, opts plugin.Options, timeout time.Duration) *running {
	GinkgoHelper()
	return startSchedulerWith(sctx, opts, timeout, nil)
}

// startSchedulerWith is startScheduler with the rendered configuration's options changed by
// configure (nil: none).
func startSchedulerWith(sctx context.Context, opts plugin.Options, timeout time.Duration, configure func(*config.Options)) *running {
	GinkgoHelper()
	r := &running{reg: prometheus.NewRegistry()}
	opts.Registerer = r.reg
	started := opts.OnStart
	opts.OnStart = func(p *plugin.Plugin) {
		r.plugin = p
		if started != nil {
			started(p)
		}
	}
	co := config.Options{Kubeconfig: filepath.Join(dir, "kubeconfig"), SliceReadyTimeout: timeout, QPS: 500, Burst: 1000}
	if configure != nil {
		configure(&co)
	}
	data, err := config.Render(co)
	Expect(err).NotTo(HaveOccurred())
	file := filepath.Join(dir, fmt.Sprintf("config-%d.yaml", time.Now().UnixNano()))
	Expect(framework.WriteFile(file, data)).To(Succeed())
	r.sched, err = server.Start(sctx, file, opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(r.plugin).NotTo(BeNil())
	return r
}

func (r *running) stop() {
	GinkgoHelper()
	Expect(r.sched.Stop()).To(Succeed())
}
