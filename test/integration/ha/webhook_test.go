package ha_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
	"github.com/slicer-operator/slicer/webhook"
	"github.com/slicer-operator/slicer/webhook/config"
)

const (
	// afterKill is how many pods must be admitted once a replica is gone.
	afterKill = 100
	writers   = 4
)

// The kube-apiserver does not retry a call to an admission webhook: the
// dispatcher makes one POST (k8s.io/apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go),
// client-go retries connection errors of GETs only (k8s.io/client-go/rest/request.go), and the
// retry with backoff of k8s.io/apiserver/pkg/util/webhook (DefaultShouldRetry: connection
// reset, 500, 429, ...) serves the authentication, authorization and audit webhooks, not
// admission. So the review a replica is answering when it dies fails, and with
// failurePolicy Fail so does that pod's creation; the next ones go to the survivor.
var _ = Describe("Two webhook replicas", func() {
	It("keep admitting when one is killed: only reviews in flight at the kill fail, every pod mutated (W1, R7)", func() {
		failures := admitThroughStop("ha-webhook-kill", (*webhookReplica).kill)
		for _, f := range failures {
			Expect(f.phase).NotTo(Equal(phaseServed), "a pod created after the survivor took over was refused: %s", f)
			Expect(f.err).To(ContainSubstring("failed calling webhook"), f.String())
		}
		// Each writer has one creation in flight at a time.
		Expect(len(failures)).To(BeNumerically("<=", writers), "%v", failures)
	})

	It("keep admitting when one stops gracefully (rolling update, eviction): no creation fails (W1, R7)", func() {
		failures := admitThroughStop("ha-webhook-stop", (*webhookReplica).stop)
		Expect(failures).To(BeEmpty())
	})
})

// Phases of a pod creation, by when it started.
const (
	phaseBefore = "before the stop"
	phaseAfter  = "after the stop, before the survivor admitted a pod"
	phaseServed = "after the survivor admitted a pod"
)

type failure struct{ pod, phase, err string }

func (f failure) String() string { return f.pod + " (" + f.phase + "): " + f.err }

// admitThroughStop serves the webhook from two replicas on one port, creates
// MIG pods from several writers, stops the replica that serves (with
// stopFn) and goes on until afterKill pods more are admitted. It checks the
// survivor served and every pod in the namespace is mutated, and returns the
// refused creations.
func admitThroughStop(ns string, stopFn func(*webhookReplica)) []failure {
	GinkgoHelper()
	Expect(k8s.Create(ctx, framework.MakeNamespace(ns))).To(Succeed())
	// The admitted pods carry Slicer's schedulerName and a MIG request: left behind, they
	// would be placed by the scheduler spec's replicas (specs run in random order on one
	// apiserver) and take the room its burst needs. No node runs them; they go at once.
	DeferCleanup(func() {
		Expect(k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))).To(Succeed())
	})
	ca, err := framework.NewCA()
	Expect(err).NotTo(HaveOccurred())
	serving, err := ca.ServingCert(time.Now().Add(time.Hour))
	Expect(err).NotTo(HaveOccurred())
	cert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	Expect(err).NotTo(HaveOccurred())

	// Both replicas listen on one 127.0.0.1 port (SO_REUSEPORT): the kernel
	// hands each new connection to one of them, as kube-proxy spreads
	// connections over a Service's endpoints.
	a := startWebhookReplica("webhook-a", 0, cert)
	b := startWebhookReplica("webhook-b", a.port, cert)

	opts := config.Options{Namespace: leaseNamespace, URL: fmt.Sprintf("https://127.0.0.1:%d%s", a.port, webhook.PathMutatePod),
		CABundle: ca.PEM, FailurePolicy: admissionregistrationv1.Fail, NamePrefix: ns}
	Expect(opts.Validate()).To(Succeed())
	mwc := config.RenderMutatingWebhookConfiguration(opts)
	for i := range mwc.Webhooks { // this test's namespace only
		sel := mwc.Webhooks[i].NamespaceSelector
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{ns}})
	}
	Expect(k8s.Create(ctx, mwc)).To(Succeed())
	DeferCleanup(func() { Expect(k8s.Delete(ctx, mwc)).To(Succeed()) })
	// The apiserver's webhook configuration informer has seen it once a pod is mutated.
	probe := 0
	Eventually(func(g Gomega) {
		probe++
		p := builder.Pod(ns, fmt.Sprintf("probe-%d", probe)).Container("c", builder.Both("nvidia.com/mig-1g.10gb", "1")).Obj()
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
		g.Expect(p.Spec.SchedulerName).To(Equal(slicerv1alpha1.SchedulerName))
	}).Should(Succeed())

	var (
		created, admittedAfter, refused atomic.Int64
		phase                           atomic.Value
		mu                              sync.Mutex
		failures                        []failure
		wg                              sync.WaitGroup
	)
	phase.Store(phaseBefore)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			// Writers give up once refusals pile up (no replica serves).
			for i := 0; admittedAfter.Load() < afterKill && refused.Load() < afterKill; i++ {
				ph := phase.Load().(string)
				name := fmt.Sprintf("w%d-%04d", w, i)
				if err := k8s.Create(ctx, builder.Pod(ns, name).Container("c", builder.Both("nvidia.com/mig-1g.10gb", "1")).Obj()); err != nil {
					mu.Lock()
					failures = append(failures, failure{pod: name, phase: ph, err: err.Error()})
					mu.Unlock()
					refused.Add(1)
					continue
				}
				created.Add(1)
				if ph != phaseBefore {
					admittedAfter.Add(1)
					phase.CompareAndSwap(phaseAfter, phaseServed)
				}
			}
		}()
	}
	// Stop the replica that serves (HTTP/2: the apiserver multiplexes its
	// calls over one connection, so one replica may serve them all).
	Eventually(func() int64 { return a.served.Load() + b.served.Load() }).Should(BeNumerically(">=", 50))
	victim, survivor := a, b
	if b.served.Load() > a.served.Load() {
		victim, survivor = b, a
	}
	beforeStop := survivor.served.Load()
	stopFn(victim)
	phase.Store(phaseAfter)
	GinkgoWriter.Printf("%s stopped after serving %d reviews (%s had served %d); %d pods admitted so far\n",
		victim.name, victim.served.Load(), survivor.name, beforeStop, created.Load())
	wg.Wait()
	GinkgoWriter.Printf("after the stop %s served %d more reviews; %d pods admitted in all; refused: %v\n",
		survivor.name, survivor.served.Load()-beforeStop, created.Load(), failures)
	Expect(survivor.served.Load()).To(BeNumerically(">", beforeStop), "the survivor served after the stop")

	// failurePolicy Fail: no pod got in without the webhook.
	var pods corev1.PodList
	Expect(k8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
	Expect(len(pods.Items)).To(BeNumerically(">", afterKill))
	for _, p := range pods.Items {
		Expect(p.Spec.SchedulerName).To(Equal(slicerv1alpha1.SchedulerName), "pod %s not mutated", p.Name)
		Expect(p.Spec.Containers[0].Resources.Limits).To(HaveKey(corev1.ResourceName(mig.ResourceName("1g.10gb"))), "pod %s not translated", p.Name)
	}
	mu.Lock()
	defer mu.Unlock()
	return failures
}

// webhookReplica is one webhook replica in-process: Slicer's handlers
// (webhook.Register) behind an HTTPS server that, like controller-runtime's
// webhook server (sigs.k8s.io/controller-runtime/pkg/webhook/server.go),
// offers HTTP/2.
type webhookReplica struct {
	name   string
	port   int
	srv    *http.Server
	served atomic.Int64
	done   chan error
}

func startWebhookReplica(name string, port int, cert tls.Certificate) *webhookReplica {
	GinkgoHelper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	Expect(err).NotTo(HaveOccurred())
	m, err := webhook.NewMetrics(prometheus.NewRegistry())
	Expect(err).NotTo(HaveOccurred())
	mux := http.NewServeMux()
	webhook.Register(muxRegistrar{mux}, webhook.Settings{SchedulerName: slicerv1alpha1.SchedulerName, TranslateNVIDIA: true}, m, logr.Discard())
	r := &webhookReplica{name: name, port: ln.Addr().(*net.TCPAddr).Port, done: make(chan error, 1)}
	r.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.served.Add(1)
			mux.ServeHTTP(w, req)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { r.done <- r.srv.ServeTLS(ln, "", "") }()
	DeferCleanup(r.kill)
	return r
}

// stop shuts the replica down the way controller-runtime's webhook server
// does when its manager stops (SIGTERM): no new connections, HTTP/2 clients
// told to go away, reviews in flight answered.
func (r *webhookReplica) stop() {
	GinkgoHelper()
	Expect(r.srv.Shutdown(context.Background())).To(Succeed())
	if err := <-r.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		Expect(err).NotTo(HaveOccurred())
	}
	r.done <- http.ErrServerClosed
}

// kill ends the replica the way a killed process does: its listener and
// every connection, idle or busy, are closed at once; nothing is drained.
func (r *webhookReplica) kill() {
	GinkgoHelper()
	if err := r.srv.Close(); err != nil {
		Expect(err).NotTo(HaveOccurred())
	}
	if err := <-r.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		Expect(err).NotTo(HaveOccurred())
	}
	r.done <- http.ErrServerClosed // a second kill returns at once
}

// muxRegistrar lets webhook.Register fill a plain ServeMux.
type muxRegistrar struct{ *http.ServeMux }

func (m muxRegistrar) Register(path string, h http.Handler) { m.Handle(path, h) }
