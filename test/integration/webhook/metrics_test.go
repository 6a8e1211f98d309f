package webhook_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/slicer-operator/slicer/internal/serving"
	"github.com/slicer-operator/slicer/test/framework"
)

// The metrics endpoint the webhook, the agent and the operator serve
// (internal/serving): HTTPS, and only to a caller whose token the apiserver
// authenticates and who may GET /metrics, which the shipped
// slicer-metrics-reader ClusterRole grants.
var _ = Describe("Metrics endpoint", Ordered, func() {
	var (
		url    string
		stop   context.CancelFunc
		done   chan error
		tokens kubernetes.Interface
	)
	BeforeAll(func() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		addr := l.Addr().String()
		Expect(l.Close()).To(Succeed())
		f := serving.Flags{MetricsAddr: addr, SecureMetrics: true, ProbeAddr: "0"}
		metrics, err := f.MetricsOptions()
		Expect(err).NotTo(HaveOccurred())
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metrics, HealthProbeBindAddress: f.ProbeAddr})
		Expect(err).NotTo(HaveOccurred())
		var mctx context.Context
		mctx, stop = context.WithCancel(context.Background())
		done = make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		url = "https://" + addr + "/metrics"
		// Every spec, run alone too, finds the server listening.
		Eventually(func() error {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				_ = c.Close()
			}
			return err
		}).Should(Succeed())
		tokens, err = kubernetes.NewForConfig(env.Config)
		Expect(err).NotTo(HaveOccurred())
	})
	AfterAll(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			Expect(err).NotTo(HaveOccurred())
		}
	})

	// get GETs /metrics with token ("" for none), skipping certificate
	// verification: this server's certificate is the self-signed one made in
	// memory (the rendered ServiceMonitors verify theirs).
	get := func(token string) (int, string, error) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed test endpoint
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	tokenFor := func(name string) string {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: slicerNS}}
		Expect(k8s.Create(ctx, sa)).To(Succeed())
		tr, err := tokens.CoreV1().ServiceAccounts(slicerNS).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		return tr.Status.Token
	}

	It("answers plain HTTP with 400 (an HTTPS server)", func() {
		resp, err := http.Get(strings.Replace(url, "https://", "http://", 1))
		Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	})

	It("answers 401 without a token and 403 to a ServiceAccount that may not read metrics", func() {
		code, _, err := get("")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusUnauthorized))
		code, _, err = get(tokenFor("no-metrics"))
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden))
	})

	It("serves the metrics to a ServiceAccount bound to slicer-metrics-reader", func() {
		role, err := framework.ShippedClusterRole("slicer-metrics-reader")
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Create(ctx, role)).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: slicerNS}},
		})).To(Succeed())
		token := tokenFor("prometheus")
		Eventually(func(g Gomega) {
			code, body, err := get(token)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK))
			g.Expect(body).To(ContainSubstring("# TYPE "))
		}).Should(Succeed())
	})
})
