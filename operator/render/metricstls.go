package render

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/internal/serving"
)

// Verified metrics endpoints. The operator issues each metrics Service of its own namespace
// a serving certificate (a Secret the component's pods mount, from operator/certs like the
// webhook's) and publishes its CA bundle in a ConfigMap next to the ServiceMonitor, which
// tells Prometheus to verify the endpoint with it (docs/listeners.md). The agent's Service,
// in the agent's namespace, is not covered yet: the operator may write Secrets only in its
// own namespace (slicer_controller.go's RBAC markers), and the agent's namespace is one it
// creates, so no Role can be installed there beforehand.
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
	// Secret holds the serving certificate (kubernetes.io/tls plus ca.crt), mounted by the
	// component's pods; CAConfigMap the CA bundle Prometheus verifies with (key MetricsCAKey).
	Secret, CAConfigMap string
}

// DNSNames are the certificate's names: the Service's in-cluster names.
func (v VerifiedMetrics) DNSNames() []string {
	svc := v.Service + "." + v.Namespace + ".svc"
	return []string{svc, svc + ".cluster.local"}
}

// ServerName is the name a scraper verifies the certificate for.
func (v VerifiedMetrics) ServerName() string { return v.DNSNames()[0] }

// MetricsTLS lists the metrics Services with an operator-issued certificate: the scheduler's
// and the webhook's, which run only with the device plugin frontend.
func MetricsTLS(o Options) []VerifiedMetrics {
	if UsesDRA(o) {
		return nil
	}
	var out []VerifiedMetrics
	for _, c := range []struct{ component, name string }{{ComponentScheduler, SchedulerName}, {ComponentWebhook, WebhookName}} {
		svc := c.name + "-metrics"
		out = append(out, VerifiedMetrics{Component: c.component, Namespace: o.Namespace, Service: svc, Secret: svc + "-cert", CAConfigMap: svc + "-ca"})
	}
	return out
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
		ObjectMeta: metav1.ObjectMeta{Name: v.Secret, Namespace: v.Namespace, Labels: labels(v.Component)},
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
