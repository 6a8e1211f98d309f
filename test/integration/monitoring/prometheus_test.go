package monitoring_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/prometheusrules"
	"github.com/slicer-operator/slicer/prometheusrules/promtest"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// serveMetrics serves a registry's /metrics on 127.0.0.1 and returns its
// host:port; the server stops with the spec.
func serveMetrics(reg *prometheus.Registry) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	DeferCleanup(srv.Close)
	return l.Addr().String()
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	port := l.Addr().(*net.TCPAddr).Port
	Expect(l.Close()).To(Succeed())
	return port
}

// startPrometheus runs Debian's prometheus with the shipped rules (the
// PrometheusRule's .spec, unchanged) and the given scrape targets, and
// returns its base URL. It is killed when the spec ends.
func startPrometheus(targets map[string]string, node string) string {
	dir := GinkgoT().TempDir()
	spec, err := prometheusrules.Load()
	Expect(err).NotTo(HaveOccurred())
	rules, err := spec.RuleFile()
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600)).To(Succeed())
	var scrape []any
	for job, addr := range targets {
		scrape = append(scrape, map[string]any{
			"job_name": job,
			// The ServiceMonitors attach the node; here a static label does.
			"static_configs": []any{map[string]any{"targets": []string{addr}, "labels": map[string]string{"node": node}}},
		})
	}
	return runPrometheus(dir, scrape)
}

// runPrometheus runs Debian's prometheus with the rules in dir/rules.yaml and
// the given scrape configurations, and returns its base URL. It is killed when the spec ends.
func runPrometheus(dir string, scrape []any) string {
	bin, err := promtest.Binary("prometheus")
	Expect(err).NotTo(HaveOccurred())
	cfg, err := yaml.Marshal(map[string]any{
		"global":         map[string]string{"scrape_interval": "1s", "evaluation_interval": "1s"},
		"rule_files":     []string{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": scrape,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "prometheus.yml"), cfg, 0o600)).To(Succeed())
	addr := "127.0.0.1:" + strconv.Itoa(freePort())
	cmd := exec.Command(bin,
		"--web.listen-address="+addr,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--config.file="+filepath.Join(dir, "prometheus.yml"))
	cmd.Stdout = GinkgoWriter
	cmd.Stderr = GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return "http://" + addr
}

// apiGet calls Prometheus' HTTP API and decodes .data into out.
func apiGet(base, path string, params url.Values, out any) error {
	resp, err := http.Get(base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: %w: %s", path, err, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// queryValue returns the value of an instant query with one result.
func queryValue(base, q string) (float64, error) {
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := apiGet(base, "/api/v1/query", url.Values{"query": {q}}, &data); err != nil {
		return 0, err
	}
	if len(data.Result) != 1 {
		return 0, fmt.Errorf("%s: %d results, want 1", q, len(data.Result))
	}
	s, ok := data.Result[0].Value[1].(string)
	if !ok {
		return 0, errors.New("value is not a string")
	}
	return strconv.ParseFloat(s, 64)
}

type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// The shipped rules in a real Prometheus, scraping the real agent (emulated
// NVML, running against the apiserver) and the scheduler's metrics: slices
// are created, one instance is orphaned, and the orphan alert goes pending.
var _ = Describe("Prometheus with the shipped rules", func() {
	It("sees the slices and raises SlicerMIGInstancesLeaked for an orphaned instance", func() {
		const node = "gpu-node-1"
		Expect(k8s.Create(ctx, builder.Node(node).Obj())).To(Succeed())
		Expect(k8s.Create(ctx, framework.MakeNamespace("team-a"))).To(Succeed())
		dir := GinkgoT().TempDir()
		backend, err := emulated.New(emulated.Options{Node: node, GPUs: []mig.Model{mig.H100_80GB}, StateFile: filepath.Join(dir, "nvml.json")})
		Expect(err).NotTo(HaveOccurred())
		Expect(backend.Init()).To(Succeed())
		// An instance no allocation references: the agent reports it
		// orphaned and, with a one-hour grace, keeps it.
		_, err = backend.CreateInstance(0, "1g.10gb", 0, false)
		Expect(err).NotTo(HaveOccurred())

		agentReg := prometheus.NewRegistry()
		metrics := engine.NewMetrics(agentReg)
		running, err := env.StartAgent(framework.AgentOptions{Node: node, Library: backend, CDIDir: filepath.Join(dir, "cdi"),
			OrphanGrace: time.Hour, Usage: &framework.StaticUsage{}, Advertiser: &framework.RecordingAdvertiser{}, Metrics: metrics},
			zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(running.Stop)

		// The scheduler's metrics struct, served as its binary serves it.
		schedReg := prometheus.NewRegistry()
		sched, err := plugin.NewMetrics(schedReg)
		Expect(err).NotTo(HaveOccurred())
		sched.ReservationsChanged(0, 2)

		// Two pods' slices.
		var allocs []*slicerv1alpha1.SliceAllocation
		for i, p := range []struct {
			profile     string
			start, size int32
		}{{"1g.10gb", 2, 1}, {"3g.40gb", 4, 4}} {
			name := fmt.Sprintf("pod-%d", i)
			uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1)
			a := framework.MakeSliceAllocation("team-a", name+"-0").Node(node).GPU(emulated.GPUUUID(node, 0)).
				Profile(p.profile, p.start, p.size).Pod(name, uid).Obj()
			a.Labels = map[string]string{slicerv1alpha1.LabelNode: node, slicerv1alpha1.LabelPodUID: uid}
			Expect(k8s.Create(ctx, a)).To(Succeed())
			allocs = append(allocs, a)
		}
		for _, a := range allocs {
			Eventually(func(g Gomega) {
				var got slicerv1alpha1.SliceAllocation
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(a), &got)).To(Succeed())
				g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady), "status %+v", got.Status)
			}).WithTimeout(30 * time.Second).Should(Succeed())
		}

		base := startPrometheus(map[string]string{
			"slicer-agent-metrics":     serveMetrics(agentReg),
			"slicer-scheduler-metrics": serveMetrics(schedReg),
		}, node)

		By("the series reach Prometheus")
		Eventually(func(g Gomega) {
			v, err := queryValue(base, `sum(slicer_agent_mig_instances{job="slicer-agent-metrics",state="allocated"})`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(Equal(2.0))
			v, err = queryValue(base, `sum(slicer_agent_mig_instances{job="slicer-agent-metrics",state="orphaned"})`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(Equal(1.0))
			v, err = queryValue(base, `slicer_scheduler_reservations{job="slicer-scheduler-metrics",state="committed"}`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(Equal(2.0))
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())

		By("the orphan alert is pending or firing, and no scheduler-down alert")
		Eventually(func(g Gomega) {
			var data struct {
				Alerts []alert `json:"alerts"`
			}
			g.Expect(apiGet(base, "/api/v1/alerts", nil, &data)).To(Succeed())
			var leaked []alert
			for _, a := range data.Alerts {
				g.Expect(a.Labels["alertname"]).NotTo(Equal("SlicerSchedulerDown"))
				if a.Labels["alertname"] == "SlicerMIGInstancesLeaked" {
					leaked = append(leaked, a)
				}
			}
			g.Expect(leaked).To(HaveLen(1))
			g.Expect(leaked[0].State).To(BeElementOf("pending", "firing"))
			g.Expect(leaked[0].Labels).To(HaveKeyWithValue("node", node))
			g.Expect(leaked[0].Labels).To(HaveKeyWithValue("gpu", "0"))
			g.Expect(leaked[0].Labels).To(HaveKeyWithValue("severity", "warning"))
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())

		By("the recording rules the dashboards use produce series")
		Eventually(func(g Gomega) {
			v, err := queryValue(base, `slicer:gpu_free_compute_slices:sum`)
			g.Expect(err).NotTo(HaveOccurred())
			// 7 compute slices minus the orphan (1g), 1g and 3g.
			g.Expect(v).To(Equal(2.0))
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())
	})
})
