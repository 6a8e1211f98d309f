package webhook_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
	"github.com/slicer-operator/slicer/webhook"
)

const (
	nv1g = "nvidia.com/mig-1g.10gb"
	sl1g = "slicer.dev/mig-1g.10gb"
	sl3g = "slicer.dev/mig-3g.40gb"
)

// expectSlicerPod checks that the stored pod is scheduled by Slicer and container i
// of list asks for want (limits = requests).
func expectSlicerPod(p *corev1.Pod, list []corev1.Container, i int, want map[string]string) {
	GinkgoHelper()
	Expect(p.Spec.SchedulerName).To(Equal(scheduler))
	limits, requests := resourceKeys(list[i])
	Expect(limits).To(Equal(want))
	Expect(requests).To(Equal(want))
}

var _ = Describe("pod admission", Ordered, func() {
	Context("with the webhook running", func() {
		It("translates nvidia.com/mig-* and sets the scheduler (W8)", func() {
			p, err := create(ctx, makePod(userNS).Container("app", builder.Limits(nv1g, "1", "cpu", "1")).Obj())
			Expect(err).NotTo(HaveOccurred())
			expectSlicerPod(p, p.Spec.Containers, 0, map[string]string{sl1g: "1", "cpu": "1"})
		})

		It("replaces default-scheduler and fills limits from requests", func() {
			p, err := create(ctx, makePod(userNS).Scheduler(corev1.DefaultSchedulerName).Container("app", builder.Requests(sl3g, "2")).Obj())
			Expect(err).NotTo(HaveOccurred())
			expectSlicerPod(p, p.Spec.Containers, 0, map[string]string{sl3g: "2"})
		})

		It("handles init-container-only requests like app containers (W9)", func() {
			p, err := create(ctx, makePod(userNS).Init("warmup", builder.Limits("nvidia.com/mig-1g.10gb.me", "1")).Container("app", builder.Limits("cpu", "1")).Obj())
			Expect(err).NotTo(HaveOccurred())
			expectSlicerPod(p, p.Spec.InitContainers, 0, map[string]string{"slicer.dev/mig-1g.10gb.me": "1"})
		})

		It("routes whole GPUs to the Slicer scheduler without rewriting them", func() {
			p, err := create(ctx, makePod(userNS).Container("app", builder.Limits("nvidia.com/gpu", "2")).Obj())
			Expect(err).NotTo(HaveOccurred())
			Expect(p.Spec.SchedulerName).To(Equal(scheduler))
			Expect(p.Spec.Containers[0].Resources.Limits).To(Equal(corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}))

			p, err = create(ctx, makePod(nativeNS).Container("app", builder.Limits("nvidia.com/gpu", "1")).Obj())
			Expect(err).NotTo(HaveOccurred())
			Expect(p.Spec.SchedulerName).To(Equal(corev1.DefaultSchedulerName), "where NVIDIA's names are NVIDIA's, so is nvidia.com/gpu")
		})

		It("refuses a whole-GPU request a user can fix, at admission", func() {
			_, err := create(ctx, makePod(userNS).Container("app", builder.Limits("nvidia.com/gpu", "1", nv1g, "1")).Obj())
			Expect(err).To(MatchError(ContainSubstring("a container gets either whole GPUs or MIG slices")))
			_, err = create(ctx, makePod(userNS).Container("app", builder.Limits("nvidia.com/gpu", "17")).Obj())
			Expect(err).To(MatchError(ContainSubstring("at most 16 whole GPUs")))
		})

		It("leaves a GPU resource that only starts like nvidia.com/gpu alone", func() {
			p, err := create(ctx, makePod(userNS).Container("app", builder.Limits("nvidia.com/gpu.shared", "1")).Obj())
			Expect(err).NotTo(HaveOccurred())
			Expect(p.Spec.SchedulerName).To(Equal(corev1.DefaultSchedulerName))
		})

		It("leaves nvidia.com/mig-* to NVIDIA in a namespace that opts out, but still serves slicer.dev", func() {
			p, err := create(ctx, makePod(nativeNS).Container("app", builder.Limits(nv1g, "1")).Obj())
			Expect(err).NotTo(HaveOccurred())
			Expect(p.Spec.SchedulerName).To(Equal(corev1.DefaultSchedulerName))
			Expect(p.Spec.Containers[0].Resources.Limits).To(HaveKey(corev1.ResourceName(nv1g)))

			p, err = create(ctx, makePod(nativeNS).Container("app", builder.Limits(sl1g, "1")).Obj())
			Expect(err).NotTo(HaveOccurred())
			expectSlicerPod(p, p.Spec.Containers, 0, map[string]string{sl1g: "1"})
		})

		It("stays correct when a later mutator adds a MIG request: reinvocation (W4)", func() {
			p, err := create(ctx, makePod(userNS).Label(dummyLabel, "on").Container("app", builder.Limits(nv1g, "1")).Container("sidecar", builder.None).Obj())
			Expect(err).NotTo(HaveOccurred())
			expectSlicerPod(p, p.Spec.Containers, 0, map[string]string{sl1g: "1"})
			expectSlicerPod(p, p.Spec.Containers, 1, map[string]string{sl1g: "1"})
		})

		It("has no side effects on dry run (W5)", func() {
			before := metricValue("slicer_webhook_mutations_total", "result", webhook.ResultMutated)
			p := makePod(userNS).Container("app", builder.Limits(nv1g, "1")).Obj()
			Expect(k8s.Create(ctx, p, client.DryRunAll)).To(Succeed())
			expectSlicerPod(p, p.Spec.Containers, 0, map[string]string{sl1g: "1"})
			Expect(metricValue("slicer_webhook_mutations_total", "result", webhook.ResultMutated)).To(Equal(before+1), "the webhook was called")
			err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "dry-run pod stored: %v", err)
		})

		DescribeTable("rejects with a message a user can act on",
			func(p *corev1.Pod, want string) {
				_, err := create(ctx, p)
				Expect(err).To(HaveOccurred())
				GinkgoWriter.Printf("rejected: %v\n", err)
				Expect(err.Error()).To(ContainSubstring(`admission webhook "translate.pods.slicer.dev" denied the request`))
				Expect(err.Error()).To(ContainSubstring(want))
			},
			Entry("unknown profile", makePod(userNS).Container("app", builder.Limits("nvidia.com/mig-3g.41gb", "1")).Obj(),
				"3g.41gb is not a MIG profile of any supported GPU; known: 1g.5gb"),
			Entry("fractional count", makePod(userNS).Container("app", builder.Limits(sl1g, "500m")).Obj(),
				"must be a positive integer"),
			Entry("pinned node", makePod(userNS).Node("gpu-node-1").Container("app", builder.Limits(nv1g, "1")).Obj(),
				`spec.nodeName is set to "gpu-node-1"`),
			Entry("forged allocation annotation (W7)", makePod(userNS).Annotation("slicer.dev/gpu-uuid", "GPU-0").Container("app", builder.Limits(nv1g, "1")).Obj(),
				`metadata.annotations["slicer.dev/gpu-uuid"]: keys under slicer.dev/ are reserved`),
			Entry("foreign scheduler (W8)", makePod(userNS).Scheduler("volcano").Container("app", builder.Limits(sl1g, "1")).Obj(),
				`spec.schedulerName is "volcano"`),
		)

		It("admits the one slicer.dev/ annotation that is the user's (slicer.dev/movable), through the webhook and the policy", func() {
			for _, p := range []*corev1.Pod{
				makePod(userNS).Annotation(slicerv1alpha1.AnnotationMovable, "false").Container("app", builder.Limits(nv1g, "1")).Obj(),
				makePod(userNS).Scheduler(scheduler).Annotation(slicerv1alpha1.AnnotationMovable, "false").Container("app", builder.Limits(sl1g, "1")).Obj(),
			} {
				got, err := create(ctx, p)
				Expect(err).NotTo(HaveOccurred())
				Expect(got.Annotations).To(HaveKeyWithValue(slicerv1alpha1.AnnotationMovable, "false"))
			}
		})

		It("rejects requests different from limits", func() {
			p := makePod(userNS).Container("app", builder.Limits(nv1g, "2")).Obj()
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{nv1g: resource.MustParse("1")}
			_, err := create(ctx, p)
			Expect(err).To(MatchError(ContainSubstring("requests (1) and limits (2) of slicer.dev/mig-1g.10gb differ")))
		})

		It("never touches mirror pods (W11)", func() {
			node := builder.Node("static-node").Ready().Obj()
			Expect(framework.CreateNode(ctx, k8s, node)).To(Succeed())
			p, err := create(ctx, makePod(userNS).Node(node.Name).Annotation(corev1.MirrorPodAnnotationKey, "hash").Container("app", builder.Limits(nv1g, "1")).Obj())
			Expect(err).NotTo(HaveOccurred())
			Expect(p.Spec.SchedulerName).To(Equal(corev1.DefaultSchedulerName))
			Expect(p.Spec.Containers[0].Resources.Limits).To(HaveKey(corev1.ResourceName(nv1g)))
		})

		It("times out a slow webhook at timeoutSeconds and applies the failure policy (W2)", func() {
			start := time.Now()
			_, err := create(ctx, makePod(userNS).Label(slowLabel, "on").Container("app", builder.Limits(nv1g, "1")).Obj())
			elapsed := time.Since(start)
			GinkgoWriter.Printf("failurePolicy Fail: answered in %v: %v\n", elapsed, err)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInternalError(err) || apierrors.IsTimeout(err)).To(BeTrue(), "error type %T %v", err, err)
			Expect(err.Error()).To(ContainSubstring(`failed calling webhook "slow.test.slicer.dev"`))
			Expect(err.Error()).To(Or(ContainSubstring("context deadline exceeded"), ContainSubstring("timeout")))

			cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
			Expect(k8s.Get(ctx, client.ObjectKey{Name: slowName}, cfg)).To(Succeed())
			cfg.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			Expect(k8s.Update(ctx, cfg)).To(Succeed())
			Eventually(func(g Gomega) {
				start = time.Now()
				p, err := create(ctx, makePod(userNS).Label(slowLabel, "on").Container("app", builder.Limits(nv1g, "1")).Obj())
				elapsed = time.Since(start)
				g.Expect(err).NotTo(HaveOccurred())
				// Slicer's own (fast) webhook still mutated it.
				expectSlicerPod(p, p.Spec.Containers, 0, map[string]string{sl1g: "1"})
			}).WithTimeout(time.Minute).Should(Succeed())
			GinkgoWriter.Printf("failurePolicy Ignore: admitted in %v\n", elapsed)
		})

		It("serves a rotated certificate without a restart; the expiry metric follows (W10)", func() {
			ca, err := framework.NewCA()
			Expect(err).NotTo(HaveOccurred())
			// 1. New CA and certificate on disk, caBundle re-injected.
			first, err := ca.ServingCert(time.Now().Add(3 * time.Hour))
			Expect(err).NotTo(HaveOccurred())
			Expect(first.WriteTo(wio.LocalServingCertDir)).To(Succeed())
			Expect(setCABundle(ca.PEM)).To(Succeed())
			expectServing(ca, first)
			// 2. Same CA, new leaf: only the reload can make handshakes succeed with it.
			second, err := ca.ServingCert(time.Now().Add(6 * time.Hour))
			Expect(err).NotTo(HaveOccurred())
			Expect(second.WriteTo(wio.LocalServingCertDir)).To(Succeed())
			expectServing(ca, second)
		})
	})

	Context("with the webhook stopped (W1, W3)", func() {
		BeforeAll(func() {
			stopWebhook()
			Eventually(func() error {
				conn, err := net.Dial("tcp", net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort)))
				if err == nil {
					_ = conn.Close()
					return fmt.Errorf("webhook port still open")
				}
				return nil
			}).Should(Succeed())
		})

		DescribeTable("admits what is not ours",
			func(p *corev1.Pod) {
				got, err := create(ctx, p)
				Expect(err).NotTo(HaveOccurred())
				Expect(got.Spec.SchedulerName).To(Equal(corev1.DefaultSchedulerName))
			},
			Entry("a pod without MIG", makePod(userNS).Container("app", builder.Limits("cpu", "1")).Obj()),
			Entry("a whole-GPU pod where NVIDIA serves nvidia.com/*", makePod(nativeNS).Container("app", builder.Limits("nvidia.com/gpu", "1")).Obj()),
			Entry("a MIG pod in kube-system", makePod("kube-system").Container("app", builder.Limits(nv1g, "1")).Obj()),
			Entry("a MIG pod in Slicer's namespace", makePod(slicerNS).Container("app", builder.Limits(nv1g, "1")).Obj()),
			Entry("Slicer's own agent pod (W3)", makePod(userNS).Label(slicerv1alpha1.LabelComponent, "agent").Container("agent", builder.Limits("cpu", "100m")).Obj()),
			Entry("Slicer's own webhook pod in its namespace (W3)", makePod(slicerNS).Label(slicerv1alpha1.LabelComponent, "webhook").Container("webhook", builder.None).Obj()),
			Entry("nvidia.com/mig-* where NVIDIA serves it", makePod(nativeNS).Container("app", builder.Limits(nv1g, "1")).Obj()),
		)

		It("admits a whole-GPU pod already written the way Slicer schedules it", func() {
			p, err := create(ctx, makePod(userNS).Scheduler(scheduler).Container("app", builder.Limits("nvidia.com/gpu", "2")).Obj())
			Expect(err).NotTo(HaveOccurred())
			Expect(p.Spec.SchedulerName).To(Equal(scheduler))
		})

		It("admits a MIG pod already written the way Slicer schedules it", func() {
			p, err := create(ctx, makePod(userNS).Scheduler(scheduler).Container("app", builder.Limits(sl1g, "1")).Obj())
			Expect(err).NotTo(HaveOccurred())
			expectSlicerPod(p, p.Spec.Containers, 0, map[string]string{sl1g: "1"})
		})

		It("admits slicer.dev/movable, the one slicer.dev/ annotation that is the user's, through the policy", func() {
			p, err := create(ctx, makePod(userNS).Scheduler(scheduler).Annotation(slicerv1alpha1.AnnotationMovable, "false").Container("app", builder.Limits(sl1g, "1")).Obj())
			Expect(err).NotTo(HaveOccurred())
			Expect(p.Annotations).To(HaveKeyWithValue(slicerv1alpha1.AnnotationMovable, "false"))
		})

		DescribeTable("rejects un-mutated MIG pods through the ValidatingAdmissionPolicy",
			func(p *corev1.Pod, want string) {
				start := time.Now()
				_, err := create(ctx, p)
				Expect(err).To(HaveOccurred())
				GinkgoWriter.Printf("rejected in %v: %v\n", time.Since(start), err)
				Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy 'slicer-mig-pods'"))
				Expect(err.Error()).To(ContainSubstring(want))
			},
			Entry("nvidia.com/mig-*", makePod(userNS).Container("app", builder.Limits(nv1g, "1")).Obj(),
				"Slicer's webhook did not rewrite it (is the webhook running?)"),
			Entry("nvidia.com/mig-* in an init container", makePod(userNS).Init("i", builder.Limits(nv1g, "1")).Container("app", builder.None).Obj(),
				"Slicer's webhook did not rewrite it"),
			Entry("slicer.dev/mig-* with the default scheduler", makePod(userNS).Container("app", builder.Limits(sl1g, "1")).Obj(),
				`spec.schedulerName is not "slicer-scheduler"`),
			Entry("slicer.dev/mig-* in a namespace that opts out of translation", makePod(nativeNS).Container("app", builder.Limits(sl1g, "1")).Obj(),
				`spec.schedulerName is not "slicer-scheduler"`),
			Entry("slicer.dev/mig-* with a pinned node", makePod(userNS).Scheduler(scheduler).Node("n1").Container("app", builder.Limits(sl1g, "1")).Obj(),
				"pins spec.nodeName"),
			Entry("slicer.dev/mig-* with a pinned node in kube-system, which the webhook skips", makePod("kube-system").Scheduler(scheduler).Node("n1").Container("app", builder.Limits(sl1g, "1")).Obj(),
				"pins spec.nodeName"),
			Entry("slicer.dev/mig-* with the default scheduler in Slicer's namespace", makePod(slicerNS).Container("app", builder.Limits(sl1g, "1")).Obj(),
				`spec.schedulerName is not "slicer-scheduler"`),
			Entry("a whole GPU with the default scheduler where Slicer places whole GPUs", makePod(userNS).Container("app", builder.Limits("nvidia.com/gpu", "1")).Obj(),
				`asks for whole GPUs (nvidia.com/gpu) in a namespace where the "slicer-scheduler" scheduler places them`),
			Entry("a whole GPU with a pinned node there", makePod(userNS).Scheduler(scheduler).Node("n1").Container("app", builder.Limits("nvidia.com/gpu", "1")).Obj(),
				"or it pins spec.nodeName"),
			Entry("a forged Slicer label, even the component label (W7)", makePod(userNS).Scheduler(scheduler).Label(slicerv1alpha1.LabelComponent, "agent").Container("app", builder.Limits(sl1g, "1")).Obj(),
				"reserved for Slicer's own allocation data"),
		)
	})
})

// metricValue reads a sample of the webhook's metrics (labels as name=value pairs).
func metricValue(name string, labels ...string) float64 {
	GinkgoHelper()
	families, err := registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	Fail("no sample of " + name)
	return 0
}

// setCABundle re-injects the caBundle of Slicer's webhooks (what the operator does on rotation).
func setCABundle(ca []byte) error {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: "slicer-mig-pods"}, cfg); err != nil {
		return err
	}
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig.CABundle = ca
	}
	return k8s.Update(ctx, cfg)
}

// expectServing waits until the webhook serves cert (direct handshake) and the apiserver
// mutates a pod through it, then checks the expiry metric.
func expectServing(ca *framework.CA, cert *framework.ServingCert) {
	GinkgoHelper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	Eventually(func() (string, error) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}).WithTimeout(time.Minute).Should(Equal(cert.Serial.String()))
	Eventually(func(g Gomega) {
		p, err := create(ctx, makePod(userNS).Container("app", builder.Limits(nv1g, "1")).Obj())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Spec.SchedulerName).To(Equal(scheduler))
	}).WithTimeout(time.Minute).Should(Succeed())
	Expect(metricValue("slicer_webhook_certificate_expiration_timestamp_seconds")).To(Equal(float64(cert.NotAfter.Unix())))
}
