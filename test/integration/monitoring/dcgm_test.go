package monitoring_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/cmd/slicer/cli"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// serveDCGM serves, for every GPU instance the emulated driver holds, per-MIG series in DCGM
// exporter's text shape (docs/monitoring.md: gpu, UUID, pci_bus_id, device, modelName,
// GPU_I_PROFILE, GPU_I_ID, Hostname, and the driver-version label), read from the driver at
// each scrape as DCGM exporter does. The GPU UUID and GPU instance id come from the driver,
// not from the agent, so the join below checks that the agent labels slices the way DCGM
// exporter labels instances. value gives an instance's engine activity and framebuffer
// use in MiB by its placement start.
func serveDCGM(backend *emulated.Backend, node string, value func(start int) (active float64, usedMiB int)) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		var b strings.Builder
		series := map[string][]string{}
		for _, in := range backend.Instances() {
			labels := fmt.Sprintf(`gpu="%d",UUID="%s",pci_bus_id="00000000:%02X:00.0",device="nvidia%d",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="%s",GPU_I_ID="%d",Hostname="%s",DCGM_FI_DRIVER_VERSION="550.127.08"`,
				in.GPU, emulated.GPUUUID(node, in.GPU), 0x1b+in.GPU, in.GPU, in.Profile, in.GPUInstance, node)
			active, used := value(in.Placement.Start)
			total := in.Placement.Size * 10240
			series["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] = append(series["DCGM_FI_PROF_GR_ENGINE_ACTIVE"], fmt.Sprintf("{%s} %g", labels, active))
			series["DCGM_FI_DEV_FB_USED"] = append(series["DCGM_FI_DEV_FB_USED"], fmt.Sprintf("{%s} %d", labels, used))
			series["DCGM_FI_DEV_FB_FREE"] = append(series["DCGM_FI_DEV_FB_FREE"], fmt.Sprintf("{%s} %d", labels, total-used))
		}
		for _, name := range []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"} {
			fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", name, name, name)
			for _, s := range series[name] {
				fmt.Fprintf(&b, "%s%s\n", name, s)
			}
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(b.String()))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	DeferCleanup(srv.Close)
	return l.Addr().String()
}

// The shipped slicer.dcgm rules in a real Prometheus, joining the real agent's slice_info
// (emulated NVML, against the apiserver) with DCGM exporter-shaped series: per-pod engine
// activity and framebuffer use come out under the pods' names.
var _ = Describe("Prometheus joining DCGM exporter's series to the agent's slices", func() {
	It("gives per-pod utilization and framebuffer use", func() {
		const node, ns = "gpu-node-dcgm", "team-d"
		Expect(k8s.Create(ctx, builder.Node(node).Obj())).To(Succeed())
		Expect(k8s.Create(ctx, framework.MakeNamespace(ns))).To(Succeed())
		dir := GinkgoT().TempDir()
		backend, err := emulated.New(emulated.Options{Node: node, GPUs: []mig.Model{mig.H100_80GB}, StateFile: filepath.Join(dir, "nvml.json")})
		Expect(err).NotTo(HaveOccurred())
		Expect(backend.Init()).To(Succeed())

		agentReg := prometheus.NewRegistry()
		running, err := env.StartAgent(framework.AgentOptions{Node: node, Library: backend, CDIDir: filepath.Join(dir, "cdi"),
			OrphanGrace: time.Hour, Usage: &framework.StaticUsage{}, Advertiser: &framework.RecordingAdvertiser{}, Metrics: engine.NewMetrics(agentReg)},
			zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(running.Stop)

		// Two pods: "small" on 1g.10gb at 0, "big" on 3g.40gb at 4 (whose second GPU instance
		// is not GI 0, so a join on anything but the real GI id would mismatch).
		for i, p := range []struct {
			pod, profile string
			start, size  int32
		}{{"small", "1g.10gb", 0, 1}, {"big", "3g.40gb", 4, 4}} {
			uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", 100+i)
			a := framework.MakeSliceAllocation(ns, p.pod+"-0").Node(node).GPU(emulated.GPUUUID(node, 0)).
				Profile(p.profile, p.start, p.size).Pod(p.pod, uid).Obj()
			a.Labels = map[string]string{slicerv1alpha1.LabelNode: node, slicerv1alpha1.LabelPodUID: uid}
			Expect(k8s.Create(ctx, a)).To(Succeed())
			Eventually(func(g Gomega) {
				var got slicerv1alpha1.SliceAllocation
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(a), &got)).To(Succeed())
				g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady), "status %+v", got.Status)
			}).WithTimeout(30 * time.Second).Should(Succeed())
		}

		base := startPrometheus(map[string]string{
			"slicer-agent-metrics": serveMetrics(agentReg),
			"nvidia-dcgm-exporter": serveDCGM(backend, node, func(start int) (float64, int) {
				if start == 4 {
					return 0.75, 12288
				}
				return 0.5, 1024
			}),
		}, node)

		By("per-pod engine activity and framebuffer use carry the pods' names")
		Eventually(func(g Gomega) {
			v, err := queryValue(base, fmt.Sprintf(`namespace_pod:slicer_dcgm_gr_engine_active:avg{namespace=%q,pod="big"}`, ns))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(Equal(0.75))
			v, err = queryValue(base, fmt.Sprintf(`namespace_pod:slicer_dcgm_gr_engine_active:avg{namespace=%q,pod="small"}`, ns))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(Equal(0.5))
			v, err = queryValue(base, fmt.Sprintf(`namespace_pod:slicer_dcgm_fb_used_bytes:sum{namespace=%q,pod="big"}`, ns))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(Equal(12288.0 * 1048576))
			v, err = queryValue(base, fmt.Sprintf(`slice:slicer_dcgm_fb_used:ratio{namespace=%q,pod="big",profile="3g.40gb",placement="4:4"}`, ns))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(BeNumerically("~", 12288.0/40960, 1e-9))
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())

		By("the step-down series the right-sizing rule compares with")
		v, err := queryValue(base, `slicer_agent_mig_profile_step_down_memory_bytes{gpu="0",profile="3g.40gb",smaller_profile="2g.20gb"}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(v).To(Equal(20e9))

		By("slicer right-size names big (12.9 GB on 3g.40gb fits 2g.20gb, not 1g.10gb), not small (1g.10gb is the smallest)")
		// A 45s window: the slicer.dcgm group records every 30s, and the agent must have been
		// scraped 45s ago.
		Eventually(func(g Gomega) {
			var stdout, stderr bytes.Buffer
			code := cli.Run(ctx, []string{"right-size", "--prometheus", base, "--window", "45s", "-o", "json"}, &stdout, &stderr)
			g.Expect(code).To(Equal(cli.ExitOK), stderr.String())
			var hints []map[string]any
			g.Expect(json.Unmarshal(stdout.Bytes(), &hints)).To(Succeed())
			g.Expect(hints).To(HaveLen(1), stdout.String())
			g.Expect(hints[0]).To(HaveKeyWithValue("pod", "big"))
			g.Expect(hints[0]).To(HaveKeyWithValue("namespace", ns))
			g.Expect(hints[0]).To(HaveKeyWithValue("profile", "3g.40gb"))
			g.Expect(hints[0]).To(HaveKeyWithValue("smallestFittingProfile", "2g.20gb"))
			g.Expect(hints[0]).To(HaveKeyWithValue("peakBytes", 12288.0*1048576))
		}).WithTimeout(120 * time.Second).WithPolling(2 * time.Second).Should(Succeed())
		var stdout, stderr bytes.Buffer
		Expect(cli.Run(ctx, []string{"right-size", "--prometheus", base, "--window", "45s"}, &stdout, &stderr)).To(Equal(cli.ExitOK), stderr.String())
		GinkgoWriter.Print(stdout.String())
		Expect(stdout.String()).To(MatchRegexp(`team-d\s+big\s+gpu-node-dcgm\s+0\s+4:4\s+3g.40gb\s+12.9 GB\s+2g.20gb \(20.0 GB\)\s+2g.20gb \(20.0 GB\)`))
	})
})
