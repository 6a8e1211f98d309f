package render

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Annotations of the certificate providers.
const (
	// ServiceCAServingSecretAnnotation asks OpenShift's service CA for a serving cert.
	ServiceCAServingSecretAnnotation = "service.beta.openshift.io/serving-cert-secret-name"
	// ServiceCAInjectAnnotation asks OpenShift's service CA to inject caBundle.
	ServiceCAInjectAnnotation = "service.beta.openshift.io/inject-cabundle"
	// CertManagerInjectAnnotation asks cert-manager's cainjector to inject caBundle.
	CertManagerInjectAnnotation = "cert-manager.io/inject-ca-from"
	// WebhookPath is the webhook handler's path.
	WebhookPath = slicerv1alpha1.WebhookPath
	// admissionNamePrefix names the admission configurations (slicer-mig-pods).
	admissionNamePrefix = "slicer"
	certDir             = "/tmp/k8s-webhook-server/serving-certs"
)

// AdmissionOptions are what the webhook issue's renderer needs.
type AdmissionOptions struct {
	NamePrefix    string
	Namespace     string
	ServiceName   string
	ServicePort   int32
	Path          string
	URL           string
	CABundle      []byte
	FailurePolicy slicerv1alpha1.FailurePolicy
	SchedulerName string
	Translate     bool
	// ExtraExcludedNamespaces are never intercepted (the agent's namespace).
	ExtraExcludedNamespaces []string
	// Annotations go on the rendered configurations (CA injection).
	Annotations map[string]string
	// SchedulerUnavailable, when set, says why no scheduler runs: no
	// MutatingWebhookConfiguration is rendered and the policy rejects MIG
	// pods with this explanation.
	SchedulerUnavailable string
}

// AdmissionRenderer renders the MutatingWebhookConfiguration and the
// ValidatingAdmissionPolicy and its binding.
type AdmissionRenderer func(AdmissionOptions) ([]client.Object, error)

// WebhookURL is the clientConfig URL in HostNetwork mode, "" otherwise.
func WebhookURL(o Options) string {
	if !o.hostNetwork() {
		return ""
	}
	return "https://" + hostPort(o.HostNetworkAddress, o.Ports.WebhookServing) + WebhookPath
}

func hostPort(host string, port int32) string {
	if host == "" {
		host = "127.0.0.1"
	}
	for _, c := range host {
		if c == ':' { // IPv6 literal
			return "[" + host + "]:" + strconv.Itoa(int(port))
		}
	}
	return host + ":" + strconv.Itoa(int(port))
}

// WebhookDNSNames are the serving certificate's DNS names.
func WebhookDNSNames(o Options) []string {
	svc := WebhookName + "." + o.Namespace
	return []string{svc + ".svc", svc + ".svc.cluster.local"}
}

func translateFlag(o Options) string {
	if translate(o) {
		return "enabled"
	}
	return "disabled"
}

func translate(o Options) bool {
	return o.Slicer.Spec.Webhook.TranslateNVIDIAResources != slicerv1alpha1.FeatureDisabled
}

// Webhook renders the webhook's ServiceAccount, Service, Deployment, PDB and
// certificate objects (cert-manager). The admission configurations come from
// WebhookAdmission, applied only once the webhook is available.
func Webhook(o Options) ([]client.Object, error) {
	p := o.Ports
	args := []string{
		"--cert-dir=" + certDir,
		"--port=" + strconv.Itoa(int(p.WebhookServing)),
		"--scheduler-name=" + schedulerName(o),
		"--translate-nvidia-resources=" + translateFlag(o),
	}
	args = append(args, listenArgs(o, p.WebhookMetrics, p.WebhookHealth)...)
	tlsMetrics, verified := metricsTLSOf(o, ComponentWebhook)
	if verified {
		args = append(args, metricsCertArgs()...)
	}
	if o.hostNetwork() {
		args = append(args, "--bind-address="+o.HostNetworkAddress)
	}
	pod := corev1.PodSpec{
		ServiceAccountName: WebhookName,
		SecurityContext:    restrictedPod(),
		HostNetwork:        o.hostNetwork(),
		Containers: []corev1.Container{{
			Name:  "webhook",
			Image: o.Images.Webhook,
			Args:  args,
			Env:   append(o.apiServerEnv(), hostIPEnvVars(o)...),
			Ports: []corev1.ContainerPort{
				{Name: "webhook", ContainerPort: p.WebhookServing, Protocol: corev1.ProtocolTCP},
				{Name: "metrics", ContainerPort: p.WebhookMetrics, Protocol: corev1.ProtocolTCP},
				{Name: "health", ContainerPort: p.WebhookHealth, Protocol: corev1.ProtocolTCP},
			},
			LivenessProbe:   httpProbe("/healthz", "health", healthHost(o), ""),
			ReadinessProbe:  httpProbe("/readyz", "health", healthHost(o), ""),
			Resources:       resources("50m", "64Mi"),
			SecurityContext: restrictedContainer(),
			VolumeMounts:    []corev1.VolumeMount{{Name: "cert", MountPath: certDir, ReadOnly: true}},
		}},
		Volumes: []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: WebhookCertSecret},
		}}},
	}
	placeControlPlane(o, ComponentWebhook, &pod)
	if verified {
		mountMetricsCert(&pod, tlsMetrics)
	}
	if o.hostNetwork() {
		pod.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	svc := &corev1.Service{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion.WithKind("Service")),
		ObjectMeta: metav1.ObjectMeta{Name: WebhookName, Namespace: o.Namespace, Labels: labels(ComponentWebhook)},
		Spec: corev1.ServiceSpec{
			Selector: selectorLabels(ComponentWebhook),
			Ports: []corev1.ServicePort{{
				Name: "webhook", Port: 443, TargetPort: intstr.FromString("webhook"), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
	if o.Cert == CertServiceCA {
		svc.Annotations = map[string]string{ServiceCAServingSecretAnnotation: WebhookCertSecret}
	}
	n := replicas(o.Slicer.Spec.Webhook.Replicas)
	objs := []client.Object{serviceAccount(o.Namespace, WebhookName, ComponentWebhook), svc}
	if o.Cert == CertCertManager {
		objs = append(objs, certManagerObjects(o)...)
	}
	objs = append(objs, deployment(o.Namespace, WebhookName, ComponentWebhook, n, pod, ""))
	return appendPDB(objs, o.Namespace, WebhookName, ComponentWebhook, n), nil
}

// WebhookAdmission renders the admission configurations with the webhook
// issue's renderer r. Without a scheduler build for the apiserver's minor
// it renders only the policy that rejects MIG pods, naming the version.
func WebhookAdmission(o Options, r AdmissionRenderer) ([]client.Object, error) {
	if r == nil {
		return nil, fmt.Errorf("no admission renderer")
	}
	ao := AdmissionOptions{
		NamePrefix:    admissionNamePrefix,
		Namespace:     o.Namespace,
		ServiceName:   WebhookName,
		ServicePort:   443,
		Path:          WebhookPath,
		URL:           WebhookURL(o),
		FailurePolicy: o.Slicer.Spec.Webhook.FailurePolicy,
		SchedulerName: schedulerName(o),
		Translate:     translate(o),
	}
	if o.AgentNamespace != "" && o.AgentNamespace != o.Namespace {
		ao.ExtraExcludedNamespaces = []string{o.AgentNamespace}
	}
	switch o.Cert {
	case CertServiceCA:
		ao.Annotations = map[string]string{ServiceCAInjectAnnotation: "true"}
	case CertCertManager:
		ao.Annotations = map[string]string{CertManagerInjectAnnotation: o.Namespace + "/" + WebhookName}
	default:
		ao.CABundle = o.CABundle
	}
	if ao.FailurePolicy == "" {
		ao.FailurePolicy = slicerv1alpha1.FailurePolicyIgnore
	}
	if !SchedulerSupported(o) {
		ao.SchedulerUnavailable = UnsupportedMessage(o)
	}
	objs, err := r(ao)
	if err != nil {
		return nil, fmt.Errorf("render admission configuration: %w", err)
	}
	for _, obj := range objs {
		l := obj.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		for k, v := range commonLabels() {
			l[k] = v
		}
		obj.SetLabels(l)
	}
	return objs, nil
}

// certManagerObjects are a self-signed Issuer and the webhook's Certificate.
func certManagerObjects(o Options) []client.Object {
	issuer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1",
		"kind":       "Issuer",
		"metadata":   map[string]any{"name": WebhookName, "namespace": o.Namespace, "labels": toAny(labels(ComponentWebhook))},
		"spec":       map[string]any{"selfSigned": map[string]any{}},
	}}
	dns := []any{}
	for _, n := range WebhookDNSNames(o) {
		dns = append(dns, n)
	}
	spec := map[string]any{
		"secretName": WebhookCertSecret,
		"dnsNames":   dns,
		"issuerRef":  map[string]any{"name": WebhookName, "kind": "Issuer"},
	}
	if o.hostNetwork() {
		spec["ipAddresses"] = []any{hostOrLoopback(o.HostNetworkAddress)}
	}
	cert := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1",
		"kind":       "Certificate",
		"metadata":   map[string]any{"name": WebhookName, "namespace": o.Namespace, "labels": toAny(labels(ComponentWebhook))},
		"spec":       spec,
	}}
	return []client.Object{issuer, cert}
}

func hostOrLoopback(h string) string {
	if h == "" {
		return "127.0.0.1"
	}
	return h
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
