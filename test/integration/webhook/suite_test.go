// Package webhook_test runs Slicer's pod webhook behind a real kube-apiserver:
// the rendered MutatingWebhookConfiguration and ValidatingAdmissionPolicy are
// installed, the webhook is served on 127.0.0.1, and pods are created through
// the apiserver, with the webhook up, then stopped (docs/design/invariants.md, W1–W11).
package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"gomodules.xyz/jsonpatch/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/framework"
	"github.com/slicer-operator/slicer/test/suite"
	"github.com/slicer-operator/slicer/webhook"
	"github.com/slicer-operator/slicer/webhook/config"
)

const (
	slicerNS   = "slicer-system"
	userNS     = "team-a"
	nativeNS   = "native" // labelled slicer.dev/translate-nvidia-resources=disabled
	scheduler  = "slicer-scheduler"
	dummyPath  = "/dummy-mutator"
	dummyLabel = "test.slicer.dev/dummy-mutator"
	slowPath   = "/slow-mutate-pod"
	slowLabel  = "test.slicer.dev/slow"
	slowName   = "slow-mig-pods"
)

var (
	env      *framework.Env
	k8s      client.Client
	ctx      = context.Background()
	wio      *envtest.WebhookInstallOptions // as installed (port, cert dir)
	metrics  *webhook.Metrics
	registry *prometheus.Registry
	srv      ctrlwebhook.Server
	stopMgr  context.CancelFunc
	mgrDone  chan error
)

func TestWebhook(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhook suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	opts := config.Options{Namespace: slicerNS, ServiceName: "slicer-webhook", ServicePath: webhook.PathMutatePod}
	Expect(opts.Validate()).To(Succeed())
	env = suite.Start(framework.Options{Webhooks: &envtest.WebhookInstallOptions{
		LocalServingHost: "127.0.0.1",
		MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{
			config.RenderMutatingWebhookConfiguration(opts), dummyMutatorConfiguration(), slowConfiguration(opts),
		},
	}})
	k8s = env.Client
	wio = &env.Environment.WebhookInstallOptions
	GinkgoWriter.Printf("kube-apiserver %s; webhook served at https://%s:%d, certs in %s\n", env.ServerVersion, wio.LocalServingHost, wio.LocalServingPort, wio.LocalServingCertDir)

	// The apiserver accepting these objects shows that admissionregistration.k8s.io/v1
	// ValidatingAdmissionPolicy and webhook matchConditions are served and enabled.
	policy, binding := config.RenderValidatingAdmissionPolicy(opts)
	Expect(k8s.Create(ctx, policy)).To(Succeed())
	Expect(k8s.Create(ctx, binding)).To(Succeed())
	installed := &admissionregistrationv1.MutatingWebhookConfiguration{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: config.ObjectName(opts)}, installed)).To(Succeed())
	for _, w := range installed.Webhooks {
		Expect(w.MatchConditions).To(HaveLen(3), "the apiserver dropped matchConditions of %s: feature off?", w.Name)
		GinkgoWriter.Printf("webhook %s -> %s\n", w.Name, ptr.Deref(w.ClientConfig.URL, "?"))
	}
	GinkgoWriter.Printf("ValidatingAdmissionPolicy %s (v1) and MutatingWebhookConfiguration matchConditions accepted by %s\n", policy.Name, env.ServerVersion)

	for _, ns := range []string{slicerNS, userNS} {
		Expect(k8s.Create(ctx, framework.MakeNamespace(ns))).To(Succeed())
	}
	native := framework.MakeNamespace(nativeNS)
	native.Labels = map[string]string{slicerv1alpha1.LabelTranslateNVIDIAResources: "disabled"}
	Expect(k8s.Create(ctx, native)).To(Succeed())

	startWebhook()
})

var _ = AfterSuite(func() {
	stopWebhook()
})

// startWebhook runs the webhook the way cmd/slicer-webhook does, on envtest's host, port and certs.
func startWebhook() {
	var err error
	registry = prometheus.NewRegistry()
	metrics, err = webhook.NewMetrics(registry)
	Expect(err).NotTo(HaveOccurred())
	var watcher *certwatcher.CertWatcher
	srv, watcher, err = webhook.NewServer(webhook.ServerOptions{
		Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		Settings: webhook.Settings{SchedulerName: scheduler, TranslateNVIDIA: true},
	}, metrics, ctrl.Log.WithName("webhook"))
	Expect(err).NotTo(HaveOccurred())
	srv.Register(dummyPath, &admission.Webhook{Handler: admission.HandlerFunc(dummyMutator)})
	slow := &admission.Webhook{Handler: &webhook.Handler{Settings: webhook.Settings{SchedulerName: scheduler, TranslateNVIDIA: true}}}
	srv.Register(slowPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The delay hook: longer than timeoutSeconds; gives up when the apiserver hangs up.
		select {
		case <-time.After(3 * time.Duration(config.TimeoutSeconds) * time.Second):
			slow.ServeHTTP(w, r)
		case <-r.Context().Done():
		}
	}))
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          srv,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(mgr.Add(watcher)).To(Succeed())
	Expect(mgr.GetWebhookServer()).To(BeIdenticalTo(srv)) // also adds it to the manager
	var mctx context.Context
	mctx, stopMgr = context.WithCancel(context.Background())
	mgrDone = make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mctx) }()
	Eventually(func() error { return srv.StartedChecker()(&http.Request{}) }).Should(Succeed())
}

// stopWebhook stops the manager and waits for it.
func stopWebhook() {
	if stopMgr == nil {
		return
	}
	stopMgr()
	stopMgr = nil
	err := <-mgrDone
	if err != nil && !errors.Is(err, context.Canceled) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// dummyMutatorConfiguration is a second mutating webhook, called after Slicer's
// (configurations are called in name order), that adds nvidia.com/mig-1g.10gb
// to a container named "sidecar" of pods labelled dummyLabel: Slicer's webhook
// must be reinvoked (IfNeeded) and translate it (W4).
func dummyMutatorConfiguration() *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-dummy-mutator"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "dummy.test.slicer.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "dummy", Path: ptr.To(dummyPath)}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{dummyLabel: "on"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}},
	}
}

// slowConfiguration is Slicer's rendered configuration, pointed at a handler that
// answers after timeoutSeconds, for pods labelled slowLabel (W2).
func slowConfiguration(o config.Options) *admissionregistrationv1.MutatingWebhookConfiguration {
	o.NamePrefix, o.ServicePath, o.FailurePolicy = "slow", slowPath, admissionregistrationv1.Fail
	cfg := config.RenderMutatingWebhookConfiguration(o)
	Expect(cfg.Name).To(Equal(slowName))
	cfg.Webhooks = cfg.Webhooks[:1]
	cfg.Webhooks[0].Name = "slow.test.slicer.dev"
	cfg.Webhooks[0].ObjectSelector.MatchLabels = map[string]string{slowLabel: "on"}
	return cfg
}

func dummyMutator(_ context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	for i, c := range pod.Spec.Containers {
		if c.Name != "sidecar" {
			continue
		}
		_, nv := c.Resources.Limits["nvidia.com/mig-1g.10gb"]
		_, sl := c.Resources.Limits["slicer.dev/mig-1g.10gb"]
		if nv || sl {
			return admission.Allowed("already there")
		}
		base := fmt.Sprintf("/spec/containers/%d/resources", i)
		if c.Resources.Limits == nil {
			return admission.Patched("added", jsonpatch.NewOperation("add", base+"/limits", map[string]string{"nvidia.com/mig-1g.10gb": "1"}))
		}
		return admission.Patched("added", jsonpatch.NewOperation("add", base+"/limits/nvidia.com~1mig-1g.10gb", "1"))
	}
	return admission.Allowed("no sidecar")
}
