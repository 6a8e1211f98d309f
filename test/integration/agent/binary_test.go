package agent_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

var _ = Describe("slicer-agent binary", func() {
	It("runs emulated against the apiserver: publishes, realizes, writes CDI, persists state across a restart", func() {
		dir, err := os.MkdirTemp("", "agent") // short path: unix sockets
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, dir)
		bin := filepath.Join(dir, "slicer-agent")
		build := exec.Command("go", "build", "-o", bin, "./device-plugin/cmd/slicer-agent")
		build.Dir = framework.RepoRoot()
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		kubeconfig := filepath.Join(dir, "kubeconfig")
		Expect(os.WriteFile(kubeconfig, env.Environment.KubeConfig, 0o600)).To(Succeed())
		nodeName := "n-binary"
		Expect(k8s.Create(ctx, builder.Node(nodeName).Obj())).To(Succeed())
		state := filepath.Join(dir, "nvml.json")
		cdiDir := filepath.Join(dir, "cdi")
		start := func() *exec.Cmd {
			cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--node-name", nodeName, "--emulate", "A100-80GB:2",
				"--emulate-state-file", state, "--cdi-dir", cdiDir, "--device-plugin-dir", filepath.Join(dir, "dp"),
				"--pod-resources-socket", "", "--metrics-bind-address", "0", "--health-probe-bind-address", "0")
			var logs bytes.Buffer
			cmd.Stdout, cmd.Stderr = &logs, &logs
			Expect(cmd.Start()).To(Succeed())
			DeferCleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				GinkgoWriter.Printf("agent logs:\n%s\n", logs.String())
			})
			return cmd
		}
		cmd := start()
		p := (&node{name: nodeName}).pod("bin-a")
		a := framework.MakeSliceAllocation("team-a", "bin-a").Node(nodeName).GPU(emulated.GPUUUID(nodeName, 1)).Profile("3g.40gb", 0, 4).
			Pod(p.Name, string(p.UID)).Obj()
		a.Labels = map[string]string{slicerv1alpha1.LabelNode: nodeName}
		Expect(k8s.Create(ctx, a)).To(Succeed())
		n := &node{name: nodeName}
		got := n.waitReady(a)
		Expect(cdi.Validate((&cdi.Writer{Dir: cdiDir}).Path(framework.DeviceIDOf(got)))).To(Succeed())
		Eventually(func(g Gomega) {
			na := n.nodeAccelerator(g)
			g.Expect(na.Status.Driver).To(Equal(slicerv1alpha1.DriverStateEmulated))
			g.Expect(na.Status.GPUs).To(HaveLen(2))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		// The device plugin registers nowhere (no kubelet) but serves its sockets.
		Eventually(func() error {
			_, err := os.Stat(filepath.Join(dir, "dp", "slicer.dev-mig-3g.40gb.sock"))
			return err
		}).WithTimeout(30 * time.Second).Should(Succeed())

		// Process restart: the emulated MIG state survives; the slice is adopted.
		Expect(cmd.Process.Kill()).To(Succeed())
		_ = cmd.Wait()
		start()
		Consistently(func() string { return n.get(a).Status.MIGDeviceUUID }).WithTimeout(3 * time.Second).Should(Equal(got.Status.MIGDeviceUUID))
		n.release(a)
		n.waitGone(a)
	})
})

var _ = Describe("agent metrics", func() {
	It("registers lint-clean collectors and drops series of slices that went away", func() {
		reg := prometheus.NewRegistry()
		m := engine.NewMetrics(reg)
		n := newNode("n-metrics", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.metrics = m
		a, err := env.StartAgent(framework.AgentOptions{Node: n.name, Library: n.backend, CDIDir: n.cdiDir, OrphanGrace: time.Hour,
			Usage: n.usage, Advertiser: n.adv, Metrics: m}, GinkgoLogr)
		Expect(err).NotTo(HaveOccurred())
		n.agent = a
		al := n.allocate(0, "2g.20gb", 4, 2)
		n.waitReady(al)
		Eventually(func() float64 {
			return testutil.ToFloat64(m.Instances.WithLabelValues("0", "2g.20gb", "allocated"))
		}).Should(Equal(1.0))
		Expect(testutil.ToFloat64(m.Operations.WithLabelValues("create_gi", "success"))).To(Equal(1.0))
		Expect(testutil.ToFloat64(m.Operations.WithLabelValues("create_ci", "success"))).To(Equal(1.0))
		// One Record pass writes its gauge vectors one after another (Instances first): the
		// GPU's gauges may lag the instance count by that pass.
		Eventually(func() []float64 {
			return []float64{testutil.ToFloat64(m.FreeCompute.WithLabelValues("0")),
				testutil.ToFloat64(m.ComputeSlices.WithLabelValues("0")), testutil.ToFloat64(m.MemorySlices.WithLabelValues("0"))}
		}).Should(Equal([]float64{5, 7, 8}))
		Expect(testutil.CollectAndCount(m.SliceInfo)).To(Equal(1))
		problems, err := testutil.GatherAndLint(reg)
		Expect(err).NotTo(HaveOccurred())
		Expect(problems).To(BeEmpty())
		n.release(al)
		n.waitGone(al)
		Eventually(func() int { return testutil.CollectAndCount(m.SliceInfo) }).Should(Equal(0))
		Expect(testutil.CollectAndCount(m.Instances)).To(Equal(0))
		Expect(testutil.ToFloat64(m.OrphansReclaim.WithLabelValues("pod_gone"))).To(Equal(1.0))
		Expect(testutil.ToFloat64(m.Operations.WithLabelValues("destroy_gi", "success"))).To(Equal(1.0))
	})
})
