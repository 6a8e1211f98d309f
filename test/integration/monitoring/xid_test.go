package monitoring_test

import (
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// Issue 41 item 6: the alert on XIDs fires in a real Prometheus with the shipped rules,
// scraping the real agent (emulated NVML) when an XID takes a GPU out, and not for an
// application's XID. The e2e suites on the local node run no Prometheus, so the alert is
// proven here; test/e2e and test/e2e/dra check the rest on the node.
var _ = Describe("Prometheus with the shipped rules, on an XID", func() {
	It("fires SlicerGPUXIDError for an XID that breaks a GPU, not for an application's fault", func() {
		const node = "gpu-node-xid"
		Expect(k8s.Create(ctx, builder.Node(node).Obj())).To(Succeed())
		dir := GinkgoT().TempDir()
		backend, err := emulated.New(emulated.Options{Node: node, GPUs: []mig.Model{mig.H100_80GB, mig.H100_80GB}, StateFile: filepath.Join(dir, "nvml.json")})
		Expect(err).NotTo(HaveOccurred())
		reg := prometheus.NewRegistry()
		running, err := env.StartAgent(framework.AgentOptions{Node: node, Library: backend, CDIDir: filepath.Join(dir, "cdi"),
			OrphanGrace: time.Hour, Usage: &framework.StaticUsage{}, Advertiser: &framework.RecordingAdvertiser{}, Metrics: engine.NewMetrics(reg)},
			zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(running.Stop)
		Eventually(func() int { return backend.Calls(emulated.OpRegisterEvents) }).WithTimeout(30*time.Second).Should(BeNumerically(">=", 2), "the agent watches both GPUs")

		base := startPrometheus(map[string]string{"slicer-agent-metrics": serveMetrics(reg)}, node)
		Eventually(func() (float64, error) {
			return queryValue(base, `min(slicer_agent_gpu_healthy{job="slicer-agent-metrics"})`)
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Equal(1.0))

		Expect(backend.RaiseXID(emulated.XID{GPU: 0, GPUInstance: -1, Code: 13})).To(Succeed())
		Expect(backend.RaiseXID(emulated.XID{GPU: 1, GPUInstance: -1, Code: 79, Action: nvml.RecoveryGPUReset, Unavailable: true})).To(Succeed())
		Eventually(func(g Gomega) {
			var data struct {
				Alerts []alert `json:"alerts"`
			}
			g.Expect(apiGet(base, "/api/v1/alerts", nil, &data)).To(Succeed())
			var xid []alert
			for _, a := range data.Alerts {
				if a.Labels["alertname"] == "SlicerGPUXIDError" {
					xid = append(xid, a)
				}
			}
			g.Expect(xid).To(HaveLen(1), "one alert: XID 79 on GPU 1, none for the application's XID 13 on GPU 0")
			g.Expect(xid[0].State).To(Equal("firing"))
			g.Expect(xid[0].Labels).To(HaveKeyWithValue("node", node))
			g.Expect(xid[0].Labels).To(HaveKeyWithValue("gpu", "1"))
			g.Expect(xid[0].Labels).To(HaveKeyWithValue("xid", "79"))
			g.Expect(xid[0].Labels).To(HaveKeyWithValue("scope", "gpu"))
			v, err := queryValue(base, `slicer_agent_gpu_healthy{job="slicer-agent-metrics",gpu="1"}`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(Equal(0.0))
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())

		By("the reset brings the GPU back")
		Expect(backend.Recover(1)).To(Succeed())
		Eventually(func() (float64, error) {
			return queryValue(base, `slicer_agent_gpu_healthy{job="slicer-agent-metrics",gpu="1"}`)
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Equal(1.0))
	})
})
