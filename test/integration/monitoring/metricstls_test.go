package monitoring_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/serving"
	"github.com/slicer-operator/slicer/operator/certs"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

// A real Prometheus scrapes a metrics endpoint served as the webhook serves it
// (internal/serving, the certificate the operator issues mounted as a directory, the
// apiserver's authentication and authorization), with a ServiceAccount token bound to the
// shipped slicer-metrics-reader, the way the rendered ServiceMonitor tells it to: verifying
// the certificate with the published CA for the Service's name. The same scrape with another
// CA fails, so the token is never sent to an endpoint it cannot verify.
var _ = Describe("Verified metrics scrape", func() {
	It("scrapes with the operator's CA and refuses another", func() {
		v := render.MetricsTLS(render.Options{Slicer: &slicerv1alpha1.Slicer{}, Namespace: "slicer-system"})[1]
		Expect(v.Component).To(Equal(render.ComponentWebhook))
		issued, err := certs.Ensure(nil, certs.Request{DNSNames: v.DNSNames(), Validity: 24 * time.Hour}, time.Now())
		Expect(err).NotTo(HaveOccurred())
		wrong, err := certs.Ensure(nil, certs.Request{DNSNames: v.DNSNames(), Validity: 24 * time.Hour}, time.Now())
		Expect(err).NotTo(HaveOccurred())
		dir := GinkgoT().TempDir()
		certDir := filepath.Join(dir, "tls")
		Expect(os.Mkdir(certDir, 0o700)).To(Succeed())
		for name, data := range map[string][]byte{
			filepath.Join(certDir, serving.MetricsCertFile): issued.Data[certs.CertKey],
			filepath.Join(certDir, serving.MetricsKeyFile):  issued.Data[certs.KeyKey],
			filepath.Join(dir, "ca.crt"):                    issued.Data[certs.CAKey],
			filepath.Join(dir, "wrong-ca.crt"):              wrong.Data[certs.CAKey],
			filepath.Join(dir, "rules.yaml"):                []byte("groups: []\n"),
		} {
			Expect(os.WriteFile(name, data, 0o600)).To(Succeed())
		}

		By("serving metrics with the mounted certificate")
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		addr := l.Addr().String()
		Expect(l.Close()).To(Succeed())
		f := serving.Flags{MetricsAddr: addr, SecureMetrics: true, MetricsCertDir: certDir, ProbeAddr: "0"}
		metrics, err := f.MetricsOptions()
		Expect(err).NotTo(HaveOccurred())
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metrics, HealthProbeBindAddress: f.ProbeAddr})
		Expect(err).NotTo(HaveOccurred())
		mctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		DeferCleanup(func() {
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				Expect(err).NotTo(HaveOccurred())
			}
		})

		By("a scraper ServiceAccount bound to slicer-metrics-reader")
		role, err := framework.ShippedClusterRole("slicer-metrics-reader")
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Create(ctx, role)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, role)).To(Succeed()) })
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "prometheus-slicer-metrics"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: "slicer-system"}},
		}
		Expect(k8s.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, binding)).To(Succeed()) })
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: "slicer-system"}}
		Expect(k8s.Create(ctx, sa)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, sa)).To(Succeed()) })
		tokens, err := kubernetes.NewForConfig(env.Config)
		Expect(err).NotTo(HaveOccurred())
		tr, err := tokens.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dir, "token"), []byte(tr.Status.Token), 0o600)).To(Succeed())

		job := func(name, ca string) map[string]any {
			return map[string]any{
				"job_name":       name,
				"scheme":         "https",
				"authorization":  map[string]any{"type": "Bearer", "credentials_file": filepath.Join(dir, "token")},
				"tls_config":     map[string]any{"ca_file": filepath.Join(dir, ca), "server_name": v.ServerName()},
				"static_configs": []any{map[string]any{"targets": []string{addr}}},
			}
		}
		base := runPrometheus(dir, []any{job("verified", "ca.crt"), job("wrong-ca", "wrong-ca.crt")})

		By("the scrape that verifies with the operator's CA succeeds; the one with another CA fails the handshake")
		Eventually(func(g Gomega) {
			up, err := queryValue(base, `up{job="verified"}`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(up).To(Equal(1.0))
			// up is 1 only when the endpoint answered 200: the token was authenticated and authorized.
			samples, err := queryValue(base, `scrape_samples_scraped{job="verified"}`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(samples).To(BeNumerically(">", 0))
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			var data struct {
				ActiveTargets []struct {
					ScrapePool string `json:"scrapePool"`
					Health     string `json:"health"`
					LastError  string `json:"lastError"`
				} `json:"activeTargets"`
			}
			g.Expect(apiGet(base, "/api/v1/targets", nil, &data)).To(Succeed())
			found := false
			for _, t := range data.ActiveTargets {
				if t.ScrapePool != "wrong-ca" {
					continue
				}
				found = true
				g.Expect(t.Health).To(Equal("down"))
				g.Expect(t.LastError).To(Or(ContainSubstring("unknown authority"), ContainSubstring("x509")))
			}
			g.Expect(found).To(BeTrue(), "no wrong-ca target")
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())
		v0, err := queryValue(base, `up{job="wrong-ca"}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(v0).To(Equal(0.0))
	})
})
