// Package render turns a Slicer CR plus what the operator observed about the
// cluster into the desired objects of an installation. Every function here
// is pure: values in, objects out, deterministic order, no client and no
// clock. The controller applies the result with server-side apply.
package render

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/kubeversion"
)

// Names of the objects the operator manages. They are deterministic so a
// restarted operator finds (and never duplicates) what it created before.
const (
	SchedulerName      = slicerv1alpha1.SchedulerName
	WebhookName        = slicerv1alpha1.WebhookName
	AgentName          = slicerv1alpha1.AgentName
	DriverName         = "slicer-driver"
	OperatorName       = slicerv1alpha1.OperatorName
	ModuleName         = "slicer-nvidia"
	NodeFeatureRuleKey = "slicer-mig-capable"
	// WebhookCertSecret holds the webhook's serving certificate.
	WebhookCertSecret = "slicer-webhook-cert"
	// DriverBuildConfigMap holds driver-container/Containerfile for KMM builds.
	DriverBuildConfigMap = "slicer-driver-build"
	// SchedulerConfigMap holds the KubeSchedulerConfiguration.
	SchedulerConfigMap = "slicer-scheduler-config"
	// ManagedByLabel marks every object the operator manages.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = slicerv1alpha1.OperatorName
	// NameLabel is the app.kubernetes.io/name label of each component.
	NameLabel = "app.kubernetes.io/name"
	// PartOfLabel groups every object of the installation.
	PartOfLabel = "app.kubernetes.io/part-of"
	// PartOfValue is PartOfLabel's value.
	PartOfValue = "slicer"
)

// Component names, the value of slicerv1alpha1.LabelComponent.
const (
	ComponentScheduler = "scheduler"
	ComponentWebhook   = "webhook"
	ComponentAgent     = "agent"
)

// Images are the component images, from the operator's RELATED_IMAGE_* variables.
type Images struct {
	// Schedulers holds one scheduler build per supported Kubernetes minor
	// (RELATED_IMAGE_SCHEDULER_K8S_1_<minor>); the apiserver's minor picks one.
	Schedulers map[kubeversion.Minor]string
	Webhook    string
	Agent      string
	Driver     string
}

// SchedulerImageEnv is the operator's environment variable holding the
// scheduler build for minor m, e.g. RELATED_IMAGE_SCHEDULER_K8S_1_37.
func SchedulerImageEnv(m kubeversion.Minor) string {
	return fmt.Sprintf("RELATED_IMAGE_SCHEDULER_K8S_%d_%d", m.Major, m.Minor)
}

// Ports of the components. In HostNetwork mode they are host ports and must
// not collide with the kubelet's or each other's.
type Ports struct {
	WebhookServing  int32
	WebhookMetrics  int32
	WebhookHealth   int32
	SchedulerSecure int32
	AgentMetrics    int32
	AgentHealth     int32
}

// DefaultPorts are the ports used when the operator is not told otherwise.
func DefaultPorts() Ports {
	return Ports{
		WebhookServing:  9443,
		WebhookMetrics:  9444,
		WebhookHealth:   9445,
		SchedulerSecure: 10269,
		AgentMetrics:    9446,
		AgentHealth:     9447,
	}
}

// CertProvider is the resolved source of the webhook's serving certificate.
type CertProvider string

const (
	// CertServiceCA is OpenShift's service CA operator.
	CertServiceCA CertProvider = "OpenShiftServiceCA"
	// CertCertManager is a cert-manager Certificate from a self-signed Issuer.
	CertCertManager CertProvider = "CertManager"
	// CertSelfManaged is the operator's own CA (see operator/certs).
	CertSelfManaged CertProvider = "SelfManaged"
)

// Platform is what the operator discovered about the cluster.
type Platform struct {
	// OpenShift is true when security.openshift.io SCCs are served.
	OpenShift bool
	// NFD, KMM, Monitoring and CertManager are true when their CRDs are served.
	NFD         bool
	KMM         bool
	Monitoring  bool
	CertManager bool
	// GPUOperator is true when the NVIDIA GPU operator's API (nvidia.com/v1, its
	// ClusterPolicy) is served.
	GPUOperator bool
	// DeviceTaintRules is true when resource.k8s.io/v1 serves DeviceTaintRules (Kubernetes
	// 1.37; the DRA frontend's fence of a node under a driver upgrade).
	DeviceTaintRules bool
}

// Options is everything the renderers need.
type Options struct {
	// Slicer is the CR (defaults applied by the apiserver).
	Slicer *slicerv1alpha1.Slicer
	// Namespace of the operator, the scheduler and the webhook.
	Namespace string
	// AgentNamespace is the namespace of the agent DaemonSet; it is labelled
	// for the privileged Pod Security level, the operator namespace is not.
	AgentNamespace string
	Images         Images
	Ports          Ports
	Platform       Platform
	// Kubernetes is the version the apiserver reported (discovery /version).
	// It picks the scheduler build, its configuration and its RBAC; outside
	// kubeversion.Supported no scheduler is rendered at all.
	Kubernetes kubeversion.Version
	// Cert is the resolved certificate provider.
	Cert CertProvider
	// CABundle is the webhook CA (SelfManaged only; the other providers inject it).
	CABundle []byte
	// HostNetworkAddress is the address the apiserver uses to reach the
	// webhook in HostNetwork mode (127.0.0.1 on the local cluster).
	HostNetworkAddress string
	// APIServer is the apiserver endpoint host-network components must dial
	// instead of the kubernetes Service (KUBERNETES_SERVICE_HOST/PORT), for
	// clusters whose Service network is not routed from the node (the local
	// loopback cluster). Zero value: components use the Service as usual.
	APIServer APIServerEndpoint
	// PrometheusRule is the PrometheusRule manifest (from prometheusrules/); nil for none.
	PrometheusRule []byte
	// Dashboards are Grafana dashboards by file name (from dashboards/).
	Dashboards map[string][]byte
}

// APIServerEndpoint is a host and port of the kube-apiserver.
type APIServerEndpoint struct {
	Host string
	Port string
}

// apiServerEnv overrides the in-cluster apiserver address of host-network
// components; nil unless in HostNetwork mode with an endpoint configured.
func (o Options) apiServerEnv() []corev1.EnvVar {
	if !o.hostNetwork() || o.APIServer.Host == "" || o.APIServer.Port == "" {
		return nil
	}
	return []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: o.APIServer.Host},
		{Name: "KUBERNETES_SERVICE_PORT", Value: o.APIServer.Port},
	}
}

// hostNetwork reports whether components serve on the node's network.
func (o Options) hostNetwork() bool {
	return o.Slicer.Spec.Network.EndpointMode == slicerv1alpha1.EndpointModeHostNetwork
}

// driverMode is the CR's driver mode with the default applied.
func (o Options) driverMode() slicerv1alpha1.DriverMode {
	if m := o.Slicer.Spec.Driver.Mode; m != "" {
		return m
	}
	return slicerv1alpha1.DriverModeKMM
}

// KMMReadyLabel is the node label KMM sets once the Module is loaded there.
func KMMReadyLabel(namespace, module string) string {
	return "kmm.node.kubernetes.io/" + namespace + "." + module + ".ready"
}

func labels(component string) map[string]string {
	return map[string]string{
		NameLabel:                     "slicer-" + component,
		PartOfLabel:                   PartOfValue,
		ManagedByLabel:                ManagedByValue,
		slicerv1alpha1.LabelComponent: component,
	}
}

// ComponentPodLabels select the pods of one of Slicer's components (ComponentScheduler,
// ComponentAgent, …).
func ComponentPodLabels(component string) map[string]string { return selectorLabels(component) }

func selectorLabels(component string) map[string]string {
	return map[string]string{
		NameLabel:                     "slicer-" + component,
		slicerv1alpha1.LabelComponent: component,
	}
}

func commonLabels() map[string]string {
	return map[string]string{PartOfLabel: PartOfValue, ManagedByLabel: ManagedByValue}
}
