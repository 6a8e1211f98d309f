package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
	"github.com/slicer-operator/slicer/test/framework"
)

// Kueue's manager on the local node: the release hack/kueue pins, built by hack/build-kueue.sh
// into bin/kueue with that release's own CRDs and webhook manifests, run as a host process as
// the suites run nfd-master or OLM. Every listener is on 127.0.0.1; the apiserver reaches its
// webhooks by URL, as every webhook on this node (docs/local-cluster.md: Services have no
// endpoints here).
const (
	kueueNamespace   = "kueue-system"
	kueueWebhookPort = 19543
	kueueHealthAddr  = "127.0.0.1:18095"
	kueueMetricsAddr = "127.0.0.1:18096"
	// kueueQueueLabel names a Job's or a pod's LocalQueue (Kueue's constants.QueueLabel).
	kueueQueueLabel = "kueue.x-k8s.io/queue-name"
	// kueueMetricsCertDir is where Kueue's manager reads its metrics certificate when its
	// internal certificate management is off (cmd/kueue/main.go: metricsCertPath, fixed).
	kueueMetricsCertDir = "/etc/kueue/metrics/certs"
)

var kueueGV = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

// kueueConfig is the manager's Configuration (apis/config/v1beta2). Only the integrations the
// spec uses (batch/job and plain pods); no leader election; Kueue's own certificate rotation
// off (it would issue a certificate for kueue-webhook-service.kueue-system.svc, which the
// apiserver cannot reach here), and the visibility API server off (it would listen on every
// interface). The transformations count a pod's slicer.dev/mig-<profile>, which is what Kueue
// reads from a plain pod once Slicer's webhook has rewritten it, as nvidia.com/mig-<profile>,
// the name the ClusterQueue's quotas use (docs/kueue.md).
func kueueConfig(certDir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: %s
metrics:
  bindAddress: %s
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
featureGates:
  VisibilityOnDemand: false
integrations:
  frameworks: ["batch/job", "pod"]
resources:
  transformations:
`, kueueNamespace, kueueHealthAddr, kueueMetricsAddr, kueueWebhookPort, certDir)
	for _, p := range mig.KnownProfileNames() {
		fmt.Fprintf(&b, "  - {input: %s, strategy: Replace, outputs: {%s: \"1\"}}\n", mig.ResourceName(p), mig.NVIDIAResourceName(p))
	}
	return b.String()
}

// kueueManager is the running manager.
type kueueManager struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startKueue installs Kueue's CRDs, starts its manager and registers its webhooks; cleanups
// (in this order) unregister the webhooks, so no pod or Job create depends on a manager that
// is gone, then stop the manager. It fails, never skips, when Kueue cannot run.
func startKueue(ctx SpecContext) *kueueManager {
	start := time.Now()
	kdir := filepath.Join(repoRoot, "bin", "kueue")
	bin := filepath.Join(kdir, "kueue")
	if _, err := os.Stat(filepath.Join(kdir, "config", "webhook", "manifests.yaml")); err != nil {
		Fail(fmt.Sprintf("Kueue is not built (%v): run `make kueue-bin` (make test-e2e does)", err))
	}
	work := filepath.Join(repoRoot, ".local", "kueue")
	Expect(os.RemoveAll(work)).To(Succeed())
	certs := filepath.Join(work, "certs")
	etcUpper := filepath.Join(work, "etc-upper")
	metricsCerts := filepath.Join(etcUpper, strings.TrimPrefix(kueueMetricsCertDir, "/etc/"))
	for _, d := range []string{certs, metricsCerts, filepath.Join(work, "etc-work")} {
		Expect(os.MkdirAll(d, 0o700)).To(Succeed())
	}
	ca, err := framework.NewCA()
	Expect(err).NotTo(HaveOccurred())
	serving, err := ca.ServingCert(time.Now().Add(24 * time.Hour))
	Expect(err).NotTo(HaveOccurred())
	Expect(serving.WriteTo(certs)).To(Succeed())
	Expect(serving.WriteTo(metricsCerts)).To(Succeed())
	config := filepath.Join(work, "config.yaml")
	Expect(os.WriteFile(config, []byte(kueueConfig(certs)), 0o600)).To(Succeed())

	By("Kueue's CRDs, from its release's config/components/crd/bases")
	crds := filepath.Join(kdir, "config", "crd")
	runScript(ctx, "hack/local-cluster", "kubectl", "apply", "--server-side", "-f", crds)
	runScript(ctx, "hack/local-cluster", "kubectl", "wait", "--for", "condition=established", "--timeout", "60s", "-f", crds)
	if err := k8s.Get(ctx, client.ObjectKey{Name: kueueNamespace}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
		createNamespace(ctx, kueueNamespace)
	} else {
		Expect(err).NotTo(HaveOccurred())
	}

	By("Kueue's manager on the host, all listeners on 127.0.0.1")
	// The metrics certificate's path is fixed under /etc: the manager runs in a mount
	// namespace of its own where an overlay adds that folder to /etc; the host's /etc is
	// never written, and the mount goes with the process.
	m := &kueueManager{done: make(chan struct{}), log: filepath.Join(work, "kueue.log")}
	logf, err := os.Create(m.log)
	Expect(err).NotTo(HaveOccurred())
	m.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"`,
		"sh", etcUpper, filepath.Join(work, "etc-work"), bin, "--config", config)
	m.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	Expect(m.cmd.Start()).To(Succeed())
	go func() { _ = m.cmd.Wait(); logf.Close(); close(m.done) }()
	DeferCleanup(m.stop)

	Eventually(func() error {
		select {
		case <-m.done:
			return StopTrying("Kueue's manager exited:\n" + m.logTail(30))
		default:
		}
		return httpOK(ctx, "http://"+kueueHealthAddr+"/readyz")
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "Kueue's manager not ready; log:\n%s", m.logTail(30))

	registerKueueWebhooks(ctx, filepath.Join(kdir, "config", "webhook", "manifests.yaml"), ca.PEM)
	// Webhooks answer once registered: a dry-run ResourceFlavor goes through Kueue's mutating
	// and validating webhooks (failurePolicy Fail).
	Eventually(func() error {
		rf := kueueObject("ResourceFlavor", "", "e2e-webhook-probe")
		return k8s.Create(ctx, rf, client.DryRunAll)
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "Kueue's webhooks do not answer; log:\n%s", m.logTail(30))
	GinkgoWriter.Printf("kueue: CRDs, manager and webhooks ready in %s\n", time.Since(start).Round(time.Millisecond))
	AddReportEntry("Kueue installed and ready", time.Since(start).Round(time.Millisecond).String())
	return m
}

// listeners are the manager's TCP listeners.
func (m *kueueManager) listeners() []string {
	ls, err := processListeners(fmt.Sprintf("/proc/%d", m.cmd.Process.Pid))
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, l := range ls {
		if !l.Loopback() {
			out = append(out, "OFF LOOPBACK "+l.Addr.String())
			continue
		}
		out = append(out, l.Addr.String())
	}
	slices.Sort(out)
	return out
}

func (m *kueueManager) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(15 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

func (m *kueueManager) logTail(lines int) string {
	raw, _ := os.ReadFile(m.log)
	return localnode.Tail(string(raw), lines)
}

func httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, body)
	}
	return nil
}

// kueueServed reports whether the manager serves a webhook rule: Kueue's own API and the two
// integrations enabled in kueueConfig. The release's manifests list every integration's
// webhook; a registered webhook the manager does not serve would refuse its objects
// (failurePolicy Fail), Deployments among them.
func kueueServed(rules []admissionregistrationv1.RuleWithOperations) bool {
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				switch {
				case g == kueueGV.Group:
				case g == "batch" && res == "jobs":
				case g == "" && res == "pods":
				default:
					return false
				}
			}
		}
	}
	return len(rules) > 0
}

// kueueNamespaceSelector is what Kueue's own install puts on its pod webhooks
// (config/components/webhook/kustomization.yaml of the release): never kube-system or
// Kueue's namespace.
var kueueNamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
	Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", kueueNamespace},
}}}

// registerKueueWebhooks creates the release's webhook configurations (manifests.yaml, named
// as Kueue's install names them) for what the manager serves, each pointed at
// https://127.0.0.1:<port><its path> with caBundle; a cleanup deletes them.
func registerKueueWebhooks(ctx SpecContext, manifests string, caPEM []byte) {
	raw, err := os.ReadFile(manifests)
	Expect(err).NotTo(HaveOccurred())
	url := func(cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig {
		Expect(cc.Service).NotTo(BeNil())
		Expect(cc.Service.Path).NotTo(BeNil())
		return admissionregistrationv1.WebhookClientConfig{
			URL:      ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", kueueWebhookPort, *cc.Service.Path)),
			CABundle: caPEM,
		}
	}
	var objs []client.Object
	names := map[string]bool{} // the webhooks kept
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else {
			Expect(err).NotTo(HaveOccurred())
		}
		js, err := yaml.Marshal(doc)
		Expect(err).NotTo(HaveOccurred())
		switch doc["kind"] {
		case "MutatingWebhookConfiguration":
			var c admissionregistrationv1.MutatingWebhookConfiguration
			Expect(yaml.Unmarshal(js, &c)).To(Succeed())
			c.Name = "kueue-" + c.Name
			c.Webhooks = servedWebhooks(c.Webhooks, "mpod.kb.io", url, names,
				func(w *admissionregistrationv1.MutatingWebhook) webhookFields {
					return webhookFields{w.Name, w.Rules, &w.ClientConfig, &w.NamespaceSelector}
				})
			objs = append(objs, &c)
		case "ValidatingWebhookConfiguration":
			var c admissionregistrationv1.ValidatingWebhookConfiguration
			Expect(yaml.Unmarshal(js, &c)).To(Succeed())
			c.Name = "kueue-" + c.Name
			c.Webhooks = servedWebhooks(c.Webhooks, "vpod.kb.io", url, names,
				func(w *admissionregistrationv1.ValidatingWebhook) webhookFields {
					return webhookFields{w.Name, w.Rules, &w.ClientConfig, &w.NamespaceSelector}
				})
			objs = append(objs, &c)
		}
	}
	Expect(objs).To(HaveLen(2), "manifests.yaml: one mutating and one validating configuration")
	// the webhooks the spec relies on are in the release's manifests
	for _, n := range []string{"mjob.kb.io", "vjob.kb.io", "mpod.kb.io", "vpod.kb.io", "mworkload.kb.io", "vclusterqueue.kb.io"} {
		Expect(names).To(HaveKey(n))
	}
	for _, o := range objs {
		Expect(k8s.Create(ctx, o)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, o))).To(Succeed())
		})
	}
}

// webhookFields are the fields of a mutating or validating webhook that registerKueueWebhooks
// reads or sets.
type webhookFields struct {
	name     string
	rules    []admissionregistrationv1.RuleWithOperations
	client   *admissionregistrationv1.WebhookClientConfig
	selector **metav1.LabelSelector
}

// servedWebhooks keeps the webhooks the manager serves (kueueServed), each pointed at it (url),
// the pod webhook podWebhook limited to kueueNamespaceSelector, and adds their names to names.
func servedWebhooks[W any](ws []W, podWebhook string, url func(admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig,
	names map[string]bool, fields func(*W) webhookFields) []W {
	var keep []W
	for i := range ws {
		f := fields(&ws[i])
		if !kueueServed(f.rules) {
			continue
		}
		*f.client = url(*f.client)
		if f.name == podWebhook {
			*f.selector = kueueNamespaceSelector
		}
		names[f.name] = true
		keep = append(keep, ws[i])
	}
	return keep
}

// kueueObject is an empty Kueue object of kind, for a Get, Create or Delete.
func kueueObject(kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kueueGV.WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}
