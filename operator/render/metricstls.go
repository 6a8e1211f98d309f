package render

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/internal/serving"
)

// Verified metrics endpoints. The operator issues each metrics Service a serving certificate
// (a Secret in its own namespace, from operator/certs like the webhook's) and publishes its CA
// bundle in a ConfigMap next to the ServiceMonitor, which tells Prometheus to verify the
// endpoint with it (docs/listeners.md). The scheduler's and the webhook's pods mount their
// Secret. The agent's cannot: it runs in the agent's namespace, where the operator may not
// write Secrets (slicer_controller.go's RBAC markers), so the agent reads its Secret in the
// operator's namespace through the API (internal/serving.SecretCertificate), allowed by a Role
// there that names that one Secret (AgentMetricsCertRBAC). Every agent serves the same
// certificate, for the agent Service's name.
const (
	// MetricsCertMountPath is where a component's pods mount its metrics serving certificate.
	MetricsCertMountPath = "/etc/slicer-metrics-tls"
	// MetricsCAKey is the key of the CA bundle in a metrics CA ConfigMap.
	MetricsCAKey      = "ca.crt"
	metricsCertVolume = "metrics-tls"
)

// VerifiedMetrics is a metrics Service whose serving certificate the operator issues.
type VerifiedMetrics struct {
	// Component, Namespace and Service name the scraped Service.
	Component, Namespace, Service string
	// Secret holds the serving certificate (kubernetes.io/tls plus ca.crt), in the operator's
	// namespace SecretNamespace; CAConfigMap the CA bundle Prometheus verifies with (key
	// MetricsCAKey), in Namespace, next to the ServiceMonitor.
	Secret, SecretNamespace, CAConfigMap string
}

// DNSNames are the certificate's names: the Service's in-cluster names.
func (v VerifiedMetrics) DNSNames() []string {
	svc := v.Service + "." + v.Namespace + ".svc"
	return []string{svc, svc + ".cluster.local"}
}

// ServerName is the name a scraper verifies the certificate for.
func (v VerifiedMetrics) ServerName() string { return v.DNSNames()[0] }

// MetricsTLS lists the metrics Services with an operator-issued certificate: the scheduler's
// and the webhook's, which run only with the device plugin frontend, and the agent's, in both
// frontends.
func MetricsTLS(o Options) []VerifiedMetrics {
	agent := verifiedMetrics(o, ComponentAgent, AgentName, o.AgentNamespace)
	if UsesDRA(o) {
		return []VerifiedMetrics{agent}
	}
	return append(devicePluginFrontendMetricsTLS(o), agent)
}

// devicePluginFrontendMetricsTLS are the verified metrics of the scheduler and the webhook,
// which only the device-plugin frontend runs.
func devicePluginFrontendMetricsTLS(o Options) []VerifiedMetrics {
	return []VerifiedMetrics{verifiedMetrics(o, ComponentScheduler, SchedulerName, o.Namespace), verifiedMetrics(o, ComponentWebhook, WebhookName, o.Namespace)}
}

// verifiedMetrics names the certificate objects of the metrics Service of component name.
func verifiedMetrics(o Options, component, name, namespace string) VerifiedMetrics {
	svc := name + "-metrics"
	return VerifiedMetrics{Component: component, Namespace: namespace, Service: svc, Secret: svc + "-cert", SecretNamespace: o.Namespace, CAConfigMap: svc + "-ca"}
}

// metricsTLSOf is the verified metrics Service of component, if it has one.
func metricsTLSOf(o Options, component string) (VerifiedMetrics, bool) {
	for _, v := range MetricsTLS(o) {
		if v.Component == component {
			return v, true
		}
	}
	return VerifiedMetrics{}, false
}

// MetricsCAConfigMap renders the ConfigMap that holds v's CA bundle for Prometheus; the
// operator is its only writer.
func MetricsCAConfigMap(v VerifiedMetrics, bundle []byte) client.Object {
	return &corev1.ConfigMap{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion.WithKind("ConfigMap")),
		ObjectMeta: metav1.ObjectMeta{Name: v.CAConfigMap, Namespace: v.Namespace, Labels: labels(v.Component)},
		Data:       map[string]string{MetricsCAKey: string(bundle)},
	}
}

// MetricsCertSecret renders the Secret of v's serving certificate.
func MetricsCertSecret(v VerifiedMetrics, data map[string][]byte) client.Object {
	return &corev1.Secret{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion.WithKind("Secret")),
		ObjectMeta: metav1.ObjectMeta{Name: v.Secret, Namespace: v.SecretNamespace, Labels: labels(v.Component)},
		Type:       corev1.SecretTypeTLS,
		Data:       data,
	}
}

// mountMetricsCert mounts v's certificate Secret into the pod's first container.
func mountMetricsCert(pod *corev1.PodSpec, v VerifiedMetrics) {
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: metricsCertVolume, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: v.Secret},
	}})
	c := &pod.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: metricsCertVolume, MountPath: MetricsCertMountPath, ReadOnly: true})
}

// metricsCertArgs point a controller-runtime component (internal/serving) at its mounted
// metrics certificate.
func metricsCertArgs() []string {
	return []string{"--" + serving.FlagMetricsCertDir + "=" + MetricsCertMountPath}
}

// schedulerCertArgs give kube-scheduler's secure port the mounted certificate; it reloads
// the files when they change (k8s.io/apiserver pkg/server/options/serving.go serves them
// through dynamiccertificates.NewDynamicServingContentFromFiles).
func schedulerCertArgs() []string {
	return []string{
		"--tls-cert-file=" + MetricsCertMountPath + "/" + corev1.TLSCertKey,
		"--tls-private-key-file=" + MetricsCertMountPath + "/" + corev1.TLSPrivateKeyKey,
	}
}

// agentCertArgs point the agent at its metrics certificate's Secret, which it reads through
// the API (internal/serving.SecretCertificate).
func agentCertArgs(v VerifiedMetrics) []string {
	return []string{"--" + serving.FlagMetricsCertSecret + "=" + v.SecretNamespace + "/" + v.Secret}
}

// AgentMetricsCertName names the Role and RoleBinding that let the agent read its metrics
// certificate's Secret.
const AgentMetricsCertName = AgentName + "-metrics-cert"

// AgentMetricsCertRBAC lets the agent's ServiceAccount get its metrics certificate's Secret,
// that one Secret only, in the operator's namespace.
func AgentMetricsCertRBAC(o Options) []client.Object {
	v, _ := metricsTLSOf(o, ComponentAgent)
	r := role(v.SecretNamespace, AgentMetricsCertName, ComponentAgent, []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{v.Secret}, Verbs: []string{"get"},
	}})
	b := roleBinding(v.SecretNamespace, AgentMetricsCertName, ComponentAgent, o.AgentNamespace)
	b.Subjects[0].Name = AgentName
	return []client.Object{r, b}
}
