package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SlicerName is the only name a Slicer may have: it is a cluster singleton.
const SlicerName = "default"

// DriverMode says who provides the NVIDIA kernel driver on GPU nodes.
// +kubebuilder:validation:Enum=KMM;Preinstalled;Emulated
type DriverMode string

const (
	// DriverModeKMM loads the driver container with a KMM Module.
	DriverModeKMM DriverMode = "KMM"
	// DriverModePreinstalled trusts a driver already on the host or managed elsewhere.
	DriverModePreinstalled DriverMode = "Preinstalled"
	// DriverModeEmulated loads no driver; agents run their emulated NVML backend.
	DriverModeEmulated DriverMode = "Emulated"
)

// FailurePolicy is the webhook's failure policy.
// +kubebuilder:validation:Enum=Ignore;Fail
type FailurePolicy string

const (
	// FailurePolicyIgnore admits pods when the webhook is down; the
	// ValidatingAdmissionPolicy then rejects un-mutated MIG pods.
	FailurePolicyIgnore FailurePolicy = "Ignore"
	// FailurePolicyFail rejects matched pods when the webhook is down.
	FailurePolicyFail FailurePolicy = "Fail"
)

// CertificateProvider says where the webhook's serving certificate comes from.
// +kubebuilder:validation:Enum=Auto;OpenShiftServiceCA;CertManager;SelfManaged
type CertificateProvider string

const (
	// CertificateProviderAuto picks OpenShift's service CA when present,
	// otherwise the operator's self-managed CA.
	CertificateProviderAuto CertificateProvider = "Auto"
	// CertificateProviderOpenShiftServiceCA uses OpenShift's service-ca operator.
	CertificateProviderOpenShiftServiceCA CertificateProvider = "OpenShiftServiceCA"
	// CertificateProviderCertManager uses a cert-manager Certificate.
	CertificateProviderCertManager CertificateProvider = "CertManager"
	// CertificateProviderSelfManaged uses a CA the operator creates and rotates.
	CertificateProviderSelfManaged CertificateProvider = "SelfManaged"
)

// EndpointMode says how the control plane reaches Slicer's components.
// +kubebuilder:validation:Enum=PodNetwork;HostNetwork
type EndpointMode string

const (
	// EndpointModePodNetwork serves components on the pod network behind Services.
	EndpointModePodNetwork EndpointMode = "PodNetwork"
	// EndpointModeHostNetwork serves components on the node's network, for
	// control planes that cannot reach the pod network.
	EndpointModeHostNetwork EndpointMode = "HostNetwork"
)

// KernelMapping maps kernel versions (by regular expression) to a driver image.
type KernelMapping struct {
	// regexp matches the node's full kernel version.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Regexp string `json:"regexp"`

	// containerImage is the driver image for matching kernels; it may use
	// ${KERNEL_FULL_VERSION}. Empty means driver.image.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ContainerImage string `json:"containerImage,omitempty"`
}

// DriverBuildSpec builds the driver container in-cluster from driver-container/.
type DriverBuildSpec struct {
	// state turns the in-cluster build on or off.
	// +optional
	// +kubebuilder:default=Disabled
	State FeatureState `json:"state,omitempty"`

	// driverVersion is the NVIDIA open GPU kernel modules version to build.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+){1,2}$`
	DriverVersion string `json:"driverVersion,omitempty"`
}

// DriverSignSpec signs the kernel modules for Secure Boot.
type DriverSignSpec struct {
	// keySecret names the Secret (in the agent namespace, where the KMM Module is) with the private key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	KeySecret string `json:"keySecret"`

	// certSecret names the Secret (in the agent namespace, where the KMM Module is) with the public certificate.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CertSecret string `json:"certSecret"`
}

// DriverSpec configures the NVIDIA kernel driver.
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode == 'KMM' || ((!has(self.kernelMappings) || size(self.kernelMappings) == 0) && !has(self.build) && !has(self.sign))",message="kernelMappings, build and sign apply only when mode is KMM"
type DriverSpec struct {
	// mode says who provides the driver.
	// +optional
	// +kubebuilder:default=KMM
	Mode DriverMode `json:"mode,omitempty"`

	// image is the driver container image (KMM mode); it may use
	// ${KERNEL_FULL_VERSION}. Empty means the operator's default driver image.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// kernelMappings overrides the image per kernel.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	KernelMappings []KernelMapping `json:"kernelMappings,omitempty"`

	// build configures an in-cluster build of the driver container.
	// +optional
	Build *DriverBuildSpec `json:"build,omitempty"`

	// sign configures Secure Boot signing of the kernel modules.
	// +optional
	Sign *DriverSignSpec `json:"sign,omitempty"`

	// inTreeModulesToRemove are unloaded before the driver is loaded.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9_-]+$`
	// +kubebuilder:default={nouveau}
	InTreeModulesToRemove []string `json:"inTreeModulesToRemove,omitempty"`

	// upgrade says how a change of the driver reaches the nodes in mode KMM: node by node,
	// their MIG pods drained first (docs/driver-upgrade.md).
	// +optional
	// +kubebuilder:default={}
	Upgrade DriverUpgradeSpec `json:"upgrade,omitempty"`
}

// NodeFeatureOperator is an NFD match-expression operator.
// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist;Gt;Lt;IsTrue;IsFalse
type NodeFeatureOperator string

// NodeFeatureExpression is one extra NFD match expression that a node must
// satisfy to be labelled MIG-capable.
// +kubebuilder:validation:XValidation:rule="self.operator in ['Exists', 'DoesNotExist', 'IsTrue', 'IsFalse'] ? (!has(self.values) || size(self.values) == 0) : (has(self.values) && size(self.values) > 0)",message="values must be empty for Exists, DoesNotExist, IsTrue and IsFalse, and non-empty otherwise"
type NodeFeatureExpression struct {
	// feature is the NFD feature, e.g. kernel.loadedmodule or pci.device.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+(\.[a-z0-9_]+)+$`
	Feature string `json:"feature"`

	// key is the element of the feature to match, e.g. a module name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Key string `json:"key"`

	// operator is the NFD operator.
	// +required
	Operator NodeFeatureOperator `json:"operator"`

	// values are the operands of the operator.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=128
	Values []string `json:"values,omitempty"`
}

// NodeSelectionSpec says how the nodes Slicer manages are found.
// +kubebuilder:validation:XValidation:rule="!has(self.nodeFeatureRule) || self.nodeFeatureRule == 'Enabled' || !has(self.extraMatchExpressions) || size(self.extraMatchExpressions) == 0",message="extraMatchExpressions apply only when nodeFeatureRule is Enabled"
type NodeSelectionSpec struct {
	// nodeFeatureRule: Enabled applies the NodeFeatureRule that labels
	// MIG-capable nodes slicer.dev/mig-capable=true; it needs Node Feature
	// Discovery (nfd.k8s-sigs.io), and Slicer is not Available while NFD is
	// missing. Disabled applies no rule (and removes one applied before) and
	// does not need NFD: label the GPU nodes slicer.dev/mig-capable=true
	// another way.
	// +optional
	// +kubebuilder:default=Enabled
	NodeFeatureRule FeatureState `json:"nodeFeatureRule,omitempty"`

	// extraMatchExpressions are added to the NodeFeatureRule's match terms.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ExtraMatchExpressions []NodeFeatureExpression `json:"extraMatchExpressions,omitempty"`
}

// SchedulerSpec configures the MIG-aware kube-scheduler.
type SchedulerSpec struct {
	// name is the schedulerName pods are given.
	// +optional
	// +kubebuilder:default=slicer-scheduler
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self != 'default-scheduler'",message="must not be default-scheduler: Slicer runs a second scheduler"
	Name string `json:"name,omitempty"`

	// replicas of the scheduler Deployment (one leads, the others stand by).
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	Replicas int32 `json:"replicas,omitempty"`

	// sliceReadyTimeoutSeconds bounds how long binding waits for the agent
	// to report a slice Ready before the attempt fails and is retried.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	SliceReadyTimeoutSeconds int32 `json:"sliceReadyTimeoutSeconds,omitempty"`
}

// WebhookSpec configures the mutating admission webhook.
type WebhookSpec struct {
	// failurePolicy applies when the webhook cannot be reached.
	// +optional
	// +kubebuilder:default=Ignore
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`

	// replicas of the webhook Deployment.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	Replicas int32 `json:"replicas,omitempty"`

	// translateNVIDIAResources rewrites nvidia.com/mig-<profile> requests to
	// Slicer's resources cluster-wide. Namespaces opt out with the label
	// slicer.dev/translate-nvidia-resources=disabled.
	// +optional
	// +kubebuilder:default=Enabled
	TranslateNVIDIAResources FeatureState `json:"translateNVIDIAResources,omitempty"`

	// certificateProvider says where the serving certificate comes from.
	// +optional
	// +kubebuilder:default=Auto
	CertificateProvider CertificateProvider `json:"certificateProvider,omitempty"`
}

// EmulatedGPUs is a number of emulated GPUs of one model on every agent node.
type EmulatedGPUs struct {
	// model of the emulated GPUs.
	// +required
	Model GPUModel `json:"model"`

	// count of GPUs of this model per node.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Count int32 `json:"count"`
}

// AgentSpec configures the node agent DaemonSet.
type AgentSpec struct {
	// emulatedGPUs are the GPUs each agent emulates in Emulated driver mode. In KMM mode
	// they make the agent emulate GPUs on the nodes where KMM loaded the driver: a test setup
	// of KMM's driver loading and of the rolling driver upgrade on nodes without GPUs
	// (hack/kmm/run.sh), not for nodes with GPUs.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.map(g, g.count).sum() <= 16",message="at most 16 emulated GPUs per node"
	EmulatedGPUs []EmulatedGPUs `json:"emulatedGPUs,omitempty"`

	// orphanGracePeriodSeconds is how long a MIG instance that no allocation
	// wants is left alone before the agent destroys it (only if unused).
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	OrphanGracePeriodSeconds int32 `json:"orphanGracePeriodSeconds,omitempty"`

	// cdiDirectory is the host directory CDI specs are written to.
	// +optional
	// +kubebuilder:default=/var/run/cdi
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^/[^\s]*$`
	CDIDirectory string `json:"cdiDirectory,omitempty"`

	// kubeletRootDir is the kubelets' root directory on the GPU nodes (their --root-dir).
	// The agent mounts the kubelet's device-plugins, pod-resources, plugins and
	// plugins_registry directories from under it, at the same paths, and its DRA plugin
	// registers socket paths under it, which the kubelet dials as given.
	// +optional
	// +kubebuilder:default=/var/lib/kubelet
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:XValidation:rule="self.matches('^(/[^/[:space:]]+)+$') && !self.split('/').exists(s, s == '.' || s == '..')",message="must be an absolute directory path: no trailing or double slash, no . or .. segment, no spaces"
	KubeletRootDir string `json:"kubeletRootDir,omitempty"`

	// tolerations added to the agent pods (GPU nodes are often tainted).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// MonitoringSpec turns the monitoring objects on or off. Each is applied
// only when its CRDs (monitoring.coreos.com) exist.
type MonitoringSpec struct {
	// serviceMonitors for the operator, scheduler, webhook and agent.
	// +optional
	// +kubebuilder:default=Enabled
	ServiceMonitors FeatureState `json:"serviceMonitors,omitempty"`

	// prometheusRule with Slicer's alerts and recording rules.
	// +optional
	// +kubebuilder:default=Enabled
	PrometheusRule FeatureState `json:"prometheusRule,omitempty"`

	// dashboards as Grafana/OpenShift-console ConfigMaps.
	// +optional
	// +kubebuilder:default=Enabled
	Dashboards FeatureState `json:"dashboards,omitempty"`
}

// NetworkSpec says how the control plane reaches Slicer's components.
// +kubebuilder:validation:XValidation:rule="!has(self.listenAddress) || (has(self.endpointMode) && self.endpointMode == 'HostNetwork')",message="listenAddress applies only to endpointMode HostNetwork (on the pod network each component listens in its own pod)",fieldPath=".listenAddress"
type NetworkSpec struct {
	// endpointMode for the webhook, scheduler and agent metrics.
	// +optional
	// +kubebuilder:default=PodNetwork
	EndpointMode EndpointMode `json:"endpointMode,omitempty"`

	// listenAddress is the node address on which host-network components
	// serve what Prometheus scrapes: the webhook's and the agent's metrics
	// and the scheduler's secure port (metrics and health). Only with
	// endpointMode HostNetwork. Empty means each pod's node address
	// (status.hostIP), the address the metrics Services point at;
	// 127.0.0.1 keeps every listener off the network (a single-node cluster
	// whose Prometheus runs on the node). The wildcard addresses are refused:
	// no component listens on every interface of a node. Health probes
	// listen on 127.0.0.1 in HostNetwork mode whatever this says, and the
	// webhook serves on the operator's --host-network-address.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self) && !ip(self).isUnspecified()",message="must be an IP address, not 0.0.0.0 or ::"
	ListenAddress string `json:"listenAddress,omitempty"`
}

// AvoidGPUNodes says how firmly Slicer's control plane (its scheduler, webhook and operator)
// keeps off the GPU nodes Slicer manages, the nodes labelled slicer.dev/mig-capable=true:
// root on such a node holds the tokens of the pods there.
// +kubebuilder:validation:Enum=Preferred;Required
type AvoidGPUNodes string

const (
	// AvoidGPUNodesPreferred: the pods prefer other nodes and run on a GPU node only when no
	// other node fits them.
	AvoidGPUNodesPreferred AvoidGPUNodes = "Preferred"
	// AvoidGPUNodesRequired: the pods never run on a GPU node; they stay Pending when no other
	// node fits them.
	AvoidGPUNodesRequired AvoidGPUNodes = "Required"
)

// ControlPlaneSpec places Slicer's scheduler and webhook. The operator's own Deployment is
// installed with the same rule by its manifests (config/manager, the Helm chart, the OLM
// bundle), which the operator does not rewrite: docs/install.md says how to make it required
// there too.
// +kubebuilder:validation:XValidation:rule="!(has(self.avoidGPUNodes) && self.avoidGPUNodes == 'Required' && has(self.nodeSelector) && 'slicer.dev/mig-capable' in self.nodeSelector && self.nodeSelector['slicer.dev/mig-capable'] == 'true')",message="nodeSelector selects the GPU nodes (slicer.dev/mig-capable=true) that avoidGPUNodes: Required keeps the control plane off: no pod could run",fieldPath=".nodeSelector"
type ControlPlaneSpec struct {
	// avoidGPUNodes: Preferred (the default) lets the scheduler and webhook pods run on a GPU
	// node only when no other node fits; Required never does.
	// +optional
	// +kubebuilder:default=Preferred
	AvoidGPUNodes AvoidGPUNodes `json:"avoidGPUNodes,omitempty"`

	// nodeSelector the scheduler and webhook pods must match (e.g. the cluster's
	// infrastructure nodes).
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && size(self[k]) <= 63)",message="label keys have at most 317 characters, values at most 63"
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations added to the scheduler and webhook pods (e.g. of tainted infrastructure
	// nodes).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// PrioritySpec is about the priority classes Slicer's pods run at (docs/install.md,
// "Critical priority classes").
type PrioritySpec struct {
	// criticalPriorityQuota: Enabled renders, in the operator's and the agent's namespaces, a
	// ResourceQuota that admits pods at system-node-critical and system-cluster-critical there
	// (Slicer's own pods run at system-node-critical, so that no other pod can preempt them).
	// Enable it where the kube-apiserver admits those classes only in namespaces holding such a
	// quota (the ResourceQuota admission plugin's limitedResources), the guard that keeps
	// tenants from them. Disabled (the default) renders none, and removes one rendered before.
	// +optional
	// +kubebuilder:default=Disabled
	CriticalPriorityQuota FeatureState `json:"criticalPriorityQuota,omitempty"`
}

// Frontend is how pods reach their MIG slices.
// +kubebuilder:validation:Enum=DevicePlugin;DRA
type Frontend string

const (
	// FrontendDevicePlugin: the webhook steers MIG pods to Slicer's scheduler, which places
	// each slice (SliceAllocation) before binding; the agent realizes it and hands it to the
	// kubelet as a device-plugin device.
	FrontendDevicePlugin Frontend = "DevicePlugin"
	// FrontendDRA: Kubernetes Dynamic Resource Allocation with the stock kube-scheduler. The
	// agent publishes each node's MIG placements as partitionable devices and prepares the
	// allocated ones for the kubelet; the operator installs one DeviceClass per profile and
	// deploys no scheduler and no webhook. Needs partitionable devices (Kubernetes 1.36+).
	FrontendDRA Frontend = "DRA"
)

// SlicerSpec is the desired Slicer installation.
// +kubebuilder:validation:XValidation:rule="!has(self.agent) || !has(self.agent.emulatedGPUs) || size(self.agent.emulatedGPUs) == 0 || (has(self.driver) && has(self.driver.mode) && self.driver.mode in ['Emulated', 'KMM'])",message="agent.emulatedGPUs requires driver.mode Emulated (or KMM, to try KMM's driver loading on nodes without GPUs)"
type SlicerSpec struct {
	// frontend selects how pods reach their slices: DevicePlugin (Slicer's scheduler, webhook
	// and kubelet device plugin) or DRA (Dynamic Resource Allocation with the stock
	// kube-scheduler; see docs/design/dra.md for what DRA mode does and does not do yet).
	// +optional
	// +kubebuilder:default=DevicePlugin
	Frontend Frontend `json:"frontend,omitempty"`

	// driver configures the NVIDIA kernel driver.
	// +optional
	// +kubebuilder:default={}
	Driver DriverSpec `json:"driver,omitempty"`

	// nodeSelection narrows the nodes Slicer manages.
	// +optional
	// +kubebuilder:default={}
	NodeSelection NodeSelectionSpec `json:"nodeSelection,omitempty"`

	// scheduler configures the MIG-aware scheduler.
	// +optional
	// +kubebuilder:default={}
	Scheduler SchedulerSpec `json:"scheduler,omitempty"`

	// webhook configures the admission webhook.
	// +optional
	// +kubebuilder:default={}
	Webhook WebhookSpec `json:"webhook,omitempty"`

	// agent configures the node agent.
	// +optional
	// +kubebuilder:default={}
	Agent AgentSpec `json:"agent,omitempty"`

	// monitoring configures metrics, alerts and dashboards.
	// +optional
	// +kubebuilder:default={}
	Monitoring MonitoringSpec `json:"monitoring,omitempty"`

	// network says how the control plane reaches Slicer's components.
	// +optional
	// +kubebuilder:default={}
	Network NetworkSpec `json:"network,omitempty"`

	// defragmentation moves movable pods so a pending pod that fits the free
	// compute and memory but no legal MIG placement can run (see
	// docs/design/defragmentation.md).
	// +optional
	// +kubebuilder:default={}
	Defragmentation DefragmentationSpec `json:"defragmentation,omitempty"`

	// controlPlane places the scheduler and webhook pods: off the GPU nodes by preference
	// (the default) or by requirement.
	// +optional
	// +kubebuilder:default={}
	ControlPlane ControlPlaneSpec `json:"controlPlane,omitempty"`

	// priority: what the install needs where the kube-apiserver keeps the critical priority
	// classes from tenants.
	// +optional
	// +kubebuilder:default={}
	Priority PrioritySpec `json:"priority,omitempty"`

	// uninstall says what deleting the Slicer does while pods hold MIG slices: wait for
	// them (the default) or delete them first (docs/uninstall.md).
	// +optional
	// +kubebuilder:default={}
	Uninstall UninstallSpec `json:"uninstall,omitempty"`

	// gpuModes says which GPUs Slicer may switch between a whole GPU (MIG mode off) and MIG
	// slices (docs/gpu-modes.md). The first policy that selects a GPU wins; a GPU no policy
	// selects, like every GPU while gpuModes is empty (the default), is fixed in MIG mode.
	// Two policies with the same model and the same nodeSelector are refused: the second
	// could never apply. Not yet acted on: the operator and the agents accept the field and
	// keep every GPU in MIG mode.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(p, self.exists_one(q, has(p.model) == has(q.model) && (!has(p.model) || p.model == q.model) && has(p.nodeSelector) == has(q.nodeSelector) && (!has(p.nodeSelector) || p.nodeSelector == q.nodeSelector)))",message="two policies select the same GPUs (the same model and nodeSelector): the first wins and the second could never apply; remove one or narrow its selector"
	GPUModes []GPUModePolicy `json:"gpuModes,omitempty"`
}

// SlicerSummary counts what the agents report.
type SlicerSummary struct {
	// nodes running an agent.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// readyNodes whose agent manages their GPUs.
	// +optional
	ReadyNodes int32 `json:"readyNodes,omitempty"`
	// gpus on those nodes.
	// +optional
	GPUs int32 `json:"gpus,omitempty"`
	// slicesInUse are MIG slices held by pods.
	// +optional
	SlicesInUse int32 `json:"slicesInUse,omitempty"`
}

// SlicerStatus is what the operator observed.
type SlicerStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions per component, plus Available, Progressing and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// summary counts nodes, GPUs and slices.
	// +optional
	Summary SlicerSummary `json:"summary,omitempty"`

	// driverUpgrade is where the driver stands on the nodes (mode KMM).
	// +optional
	DriverUpgrade *DriverUpgradeStatus `json:"driverUpgrade,omitempty"`
}

// Slicer is the whole Slicer installation: one cluster-scoped object named
// "default".
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driver.mode`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.summary.readyNodes`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.summary.gpus`
// +kubebuilder:printcolumn:name="Slices",type=integer,JSONPath=`.status.summary.slicesInUse`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="Slicer is a cluster singleton: metadata.name must be 'default'"
type Slicer struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired installation.
	// +optional
	// +kubebuilder:default={}
	Spec SlicerSpec `json:"spec,omitempty"`

	// status is what the operator observed.
	// +optional
	Status SlicerStatus `json:"status,omitempty"`
}

// SlicerList is a list of Slicers.
// +kubebuilder:object:root=true
type SlicerList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Slicer `json:"items"`
}
