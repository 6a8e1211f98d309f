package api_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func validSlicer() *slicerv1alpha1.Slicer {
	return &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}}
}

var _ = Describe("Slicer validation", func() {
	DescribeTable("create (server-side dry run)",
		func(mutate func(*slicerv1alpha1.Slicer), want *rejection) {
			s := validSlicer()
			mutate(s)
			expectOutcome(k8s.Create(ctx, s, client.DryRunAll), want)
		},
		// singleton
		Entry("named default", func(*slicerv1alpha1.Slicer) {}, nil),
		Entry("named other", func(s *slicerv1alpha1.Slicer) { s.Name = "other" },
			rejected(rootField, "cluster singleton")),
		// driver upgrade (docs/driver-upgrade.md)
		Entry("driver upgrade two at a time, forcing the drain after a minute, paused", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Upgrade = slicerv1alpha1.DriverUpgradeSpec{MaxUnavailable: 2, DrainTimeoutSeconds: 60, DrainTimeoutPolicy: slicerv1alpha1.DrainTimeoutForce,
				LoadTimeoutSeconds: 600, State: slicerv1alpha1.DriverUpgradePaused}
		}, nil),
		Entry("driver upgrade of no node at a time", func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Upgrade.MaxUnavailable = -1 },
			rejected("spec.driver.upgrade.maxUnavailable", "greater than or equal to 1")),
		Entry("driver upgrade drain timeout under 10 s", func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Upgrade.DrainTimeoutSeconds = 5 },
			rejected("spec.driver.upgrade.drainTimeoutSeconds", "greater than or equal to 10")),
		Entry("driver upgrade drain timeout policy unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Upgrade.DrainTimeoutPolicy = "Evict" },
			rejected("spec.driver.upgrade.drainTimeoutPolicy", "Unsupported value")),
		Entry("driver upgrade state unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Upgrade.State = "Stopped" },
			rejected("spec.driver.upgrade.state", "Unsupported value")),
		// control plane placement (docs/install.md, "The control plane off the GPU nodes")
		Entry("control plane required off the GPU nodes, on infrastructure nodes", func(s *slicerv1alpha1.Slicer) {
			s.Spec.ControlPlane = slicerv1alpha1.ControlPlaneSpec{AvoidGPUNodes: slicerv1alpha1.AvoidGPUNodesRequired,
				NodeSelector: map[string]string{"node-role.kubernetes.io/infra": ""},
				Tolerations:  []corev1.Toleration{{Key: "node-role.kubernetes.io/infra", Operator: corev1.TolerationOpExists}}}
		}, nil),
		Entry("control plane preferred off the GPU nodes but selecting them", func(s *slicerv1alpha1.Slicer) {
			s.Spec.ControlPlane = slicerv1alpha1.ControlPlaneSpec{NodeSelector: map[string]string{slicerv1alpha1.LabelMIGCapable: "true"}}
		}, nil),
		Entry("control plane required off the GPU nodes but selecting them", func(s *slicerv1alpha1.Slicer) {
			s.Spec.ControlPlane = slicerv1alpha1.ControlPlaneSpec{AvoidGPUNodes: slicerv1alpha1.AvoidGPUNodesRequired,
				NodeSelector: map[string]string{slicerv1alpha1.LabelMIGCapable: "true"}}
		}, rejected("spec.controlPlane.nodeSelector", "no pod could run")),
		Entry("control plane placement unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.ControlPlane.AvoidGPUNodes = "Always" },
			rejected("spec.controlPlane.avoidGPUNodes", "Unsupported value")),
		Entry("control plane node selector of 17 labels", func(s *slicerv1alpha1.Slicer) {
			s.Spec.ControlPlane.NodeSelector = map[string]string{}
			for i := range 17 {
				s.Spec.ControlPlane.NodeSelector[string(rune('a'+i))] = "x"
			}
		}, rejected("spec.controlPlane.nodeSelector", "must have at most 16 items")),
		// priority (docs/install.md, "Critical priority classes")
		Entry("critical priority quota Enabled", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Priority.CriticalPriorityQuota = slicerv1alpha1.FeatureEnabled
		}, nil),
		Entry("critical priority quota unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.Priority.CriticalPriorityQuota = "Yes" },
			rejected("spec.priority.criticalPriorityQuota", "Unsupported value")),
		// uninstall (docs/uninstall.md)
		Entry("uninstall policy Force", func(s *slicerv1alpha1.Slicer) { s.Spec.Uninstall.Policy = slicerv1alpha1.UninstallForce }, nil),
		Entry("uninstall policy unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.Uninstall.Policy = "Orphan" },
			rejected("spec.uninstall.policy", "Unsupported value")),
		// driver
		Entry("driver mode Emulated", func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated }, nil),
		Entry("driver mode unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Mode = "Magic" },
			rejected("spec.driver.mode", "Unsupported value")),
		Entry("kernel mappings with KMM", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.KernelMappings = []slicerv1alpha1.KernelMapping{{Regexp: `^.*\.el9\..*$`, ContainerImage: "quay.io/x/driver:${KERNEL_FULL_VERSION}"}}
		}, nil),
		Entry("kernel mappings without KMM", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Mode = slicerv1alpha1.DriverModePreinstalled
			s.Spec.Driver.KernelMappings = []slicerv1alpha1.KernelMapping{{Regexp: ".*"}}
		}, rejected("spec.driver", "apply only when mode is KMM")),
		Entry("kernel mapping with empty regexp", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.KernelMappings = []slicerv1alpha1.KernelMapping{{Regexp: ""}}
		}, rejected("spec.driver.kernelMappings[0].regexp", "at least 1 chars long")),
		Entry("17 kernel mappings", func(s *slicerv1alpha1.Slicer) {
			for i := 0; i < 17; i++ {
				s.Spec.Driver.KernelMappings = append(s.Spec.Driver.KernelMappings, slicerv1alpha1.KernelMapping{Regexp: ".*"})
			}
		}, rejected("spec.driver.kernelMappings", "must have at most 16 items")),
		Entry("build with a driver version", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Build = &slicerv1alpha1.DriverBuildSpec{State: slicerv1alpha1.FeatureEnabled, DriverVersion: "580.95.05"}
		}, nil),
		Entry("build with a malformed driver version", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Build = &slicerv1alpha1.DriverBuildSpec{DriverVersion: "latest"}
		}, rejected("spec.driver.build.driverVersion", "should match")),
		Entry("sign with both secrets", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Sign = &slicerv1alpha1.DriverSignSpec{KeySecret: "k", CertSecret: "c"}
		}, nil),
		Entry("sign without a key secret", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Sign = &slicerv1alpha1.DriverSignSpec{CertSecret: "c"}
		}, rejected("spec.driver.sign.keySecret", "at least 1 chars long")),
		Entry("in-tree module name", func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.InTreeModulesToRemove = []string{"nouveau", "nvidiafb"} }, nil),
		Entry("in-tree module name with a slash", func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.InTreeModulesToRemove = []string{"../x"} },
			rejected("spec.driver.inTreeModulesToRemove[0]", "should match")),
		// node selection
		Entry("extra NFD expression", func(s *slicerv1alpha1.Slicer) {
			s.Spec.NodeSelection.ExtraMatchExpressions = []slicerv1alpha1.NodeFeatureExpression{
				{Feature: "kernel.loadedmodule", Key: "nvidia", Operator: "Exists"},
				{Feature: "system.osrelease", Key: "ID", Operator: "In", Values: []string{"rhcos", "rhel"}},
			}
		}, nil),
		Entry("In without values", func(s *slicerv1alpha1.Slicer) {
			s.Spec.NodeSelection.ExtraMatchExpressions = []slicerv1alpha1.NodeFeatureExpression{{Feature: "system.osrelease", Key: "ID", Operator: "In"}}
		}, rejected("spec.nodeSelection.extraMatchExpressions[0]", "values must be empty for Exists")),
		Entry("unknown NFD operator", func(s *slicerv1alpha1.Slicer) {
			s.Spec.NodeSelection.ExtraMatchExpressions = []slicerv1alpha1.NodeFeatureExpression{{Feature: "system.osrelease", Key: "ID", Operator: "Matches", Values: []string{"x"}}}
		}, rejected("spec.nodeSelection.extraMatchExpressions[0].operator", "Unsupported value")),
		Entry("malformed NFD feature", func(s *slicerv1alpha1.Slicer) {
			s.Spec.NodeSelection.ExtraMatchExpressions = []slicerv1alpha1.NodeFeatureExpression{{Feature: "Kernel Module", Key: "x", Operator: "Exists"}}
		}, rejected("spec.nodeSelection.extraMatchExpressions[0].feature", "should match")),
		Entry("NodeFeatureRule disabled", func(s *slicerv1alpha1.Slicer) {
			s.Spec.NodeSelection.NodeFeatureRule = slicerv1alpha1.FeatureDisabled
		}, nil),
		Entry("extra NFD expression without the NodeFeatureRule", func(s *slicerv1alpha1.Slicer) {
			s.Spec.NodeSelection.NodeFeatureRule = slicerv1alpha1.FeatureDisabled
			s.Spec.NodeSelection.ExtraMatchExpressions = []slicerv1alpha1.NodeFeatureExpression{{Feature: "kernel.loadedmodule", Key: "nvidia", Operator: "Exists"}}
		}, rejected("spec.nodeSelection", "extraMatchExpressions apply only when nodeFeatureRule is Enabled")),
		// scheduler
		Entry("scheduler name", func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.Name = "gpu-scheduler" }, nil),
		Entry("scheduler name default-scheduler", func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.Name = "default-scheduler" },
			rejected("spec.scheduler.name", "must not be default-scheduler")),
		Entry("scheduler name with capitals", func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.Name = "Slicer" },
			rejected("spec.scheduler.name", "should match")),
		Entry("scheduler replicas 5", func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.Replicas = 5 }, nil),
		Entry("scheduler replicas 6", func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.Replicas = 6 },
			rejected("spec.scheduler.replicas", "less than or equal to 5")),
		Entry("scheduler replicas -1", func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.Replicas = -1 },
			rejected("spec.scheduler.replicas", "greater than or equal to 1")),
		Entry("slice ready timeout 600", func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.SliceReadyTimeoutSeconds = 600 }, nil),
		Entry("slice ready timeout 601", func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.SliceReadyTimeoutSeconds = 601 },
			rejected("spec.scheduler.sliceReadyTimeoutSeconds", "less than or equal to 600")),
		// webhook
		Entry("webhook failure policy Fail", func(s *slicerv1alpha1.Slicer) { s.Spec.Webhook.FailurePolicy = slicerv1alpha1.FailurePolicyFail }, nil),
		Entry("webhook failure policy unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.Webhook.FailurePolicy = "Retry" },
			rejected("spec.webhook.failurePolicy", "Unsupported value")),
		Entry("webhook certificates from cert-manager", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Webhook.CertificateProvider = slicerv1alpha1.CertificateProviderCertManager
		}, nil),
		Entry("webhook certificate provider unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.Webhook.CertificateProvider = "Vault" },
			rejected("spec.webhook.certificateProvider", "Unsupported value")),
		Entry("NVIDIA resource translation off", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Webhook.TranslateNVIDIAResources = slicerv1alpha1.FeatureDisabled
		}, nil),
		Entry("NVIDIA resource translation maybe", func(s *slicerv1alpha1.Slicer) { s.Spec.Webhook.TranslateNVIDIAResources = "Maybe" },
			rejected("spec.webhook.translateNVIDIAResources", "Unsupported value")),
		Entry("webhook replicas negative", func(s *slicerv1alpha1.Slicer) { s.Spec.Webhook.Replicas = -3 },
			rejected("spec.webhook.replicas", "greater than or equal to 1")),
		// agent
		Entry("emulated GPUs in Emulated mode", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated
			s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 2}, {Model: "A100-40GB", Count: 2}}
		}, nil),
		Entry("emulated GPUs in KMM mode (a test of KMM's driver loading: hack/kmm/run.sh)", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 2}}
		}, nil),
		Entry("emulated GPUs in Preinstalled mode", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Mode = slicerv1alpha1.DriverModePreinstalled
			s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 2}}
		}, rejected("spec", "agent.emulatedGPUs requires driver.mode Emulated (or KMM")),
		Entry("emulated GPU model unknown", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated
			s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "V100-32GB", Count: 1}}
		}, rejected("spec.agent.emulatedGPUs[0].model", "Unsupported value")),
		Entry("emulated GPU count 0", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated
			s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 0}}
		}, rejected("spec.agent.emulatedGPUs[0].count", "greater than or equal to 1")),
		Entry("more than 16 emulated GPUs", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated
			s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 10}, {Model: "A30-24GB", Count: 7}}
		}, rejected("spec.agent.emulatedGPUs", "at most 16 emulated GPUs")),
		Entry("CDI directory absolute", func(s *slicerv1alpha1.Slicer) { s.Spec.Agent.CDIDirectory = "/etc/cdi" }, nil),
		Entry("CDI directory relative", func(s *slicerv1alpha1.Slicer) { s.Spec.Agent.CDIDirectory = "cdi" },
			rejected("spec.agent.cdiDirectory", "should match")),
		Entry("kubelet root dir elsewhere", func(s *slicerv1alpha1.Slicer) { s.Spec.Agent.KubeletRootDir = "/data/k8s/kubelet" }, nil),
		Entry("kubelet root dir relative", func(s *slicerv1alpha1.Slicer) { s.Spec.Agent.KubeletRootDir = "var/lib/kubelet" },
			rejected("spec.agent.kubeletRootDir", "must be an absolute directory path")),
		Entry("kubelet root dir with a trailing slash", func(s *slicerv1alpha1.Slicer) { s.Spec.Agent.KubeletRootDir = "/var/lib/kubelet/" },
			rejected("spec.agent.kubeletRootDir", "must be an absolute directory path")),
		Entry("kubelet root dir with ..", func(s *slicerv1alpha1.Slicer) { s.Spec.Agent.KubeletRootDir = "/var/lib/../kubelet" },
			rejected("spec.agent.kubeletRootDir", "must be an absolute directory path")),
		Entry("kubelet root dir the root", func(s *slicerv1alpha1.Slicer) { s.Spec.Agent.KubeletRootDir = "/" },
			rejected("spec.agent.kubeletRootDir", "must be an absolute directory path")),
		Entry("orphan grace period a day", func(s *slicerv1alpha1.Slicer) { s.Spec.Agent.OrphanGracePeriodSeconds = 86400 }, nil),
		Entry("orphan grace period negative", func(s *slicerv1alpha1.Slicer) { s.Spec.Agent.OrphanGracePeriodSeconds = -1 },
			rejected("spec.agent.orphanGracePeriodSeconds", "greater than or equal to 0")),
		Entry("agent tolerations", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Agent.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}, nil),
		// monitoring and network
		Entry("dashboards off", func(s *slicerv1alpha1.Slicer) { s.Spec.Monitoring.Dashboards = slicerv1alpha1.FeatureDisabled }, nil),
		Entry("prometheus rule maybe", func(s *slicerv1alpha1.Slicer) { s.Spec.Monitoring.PrometheusRule = "Sometimes" },
			rejected("spec.monitoring.prometheusRule", "Unsupported value")),
		Entry("host network endpoints", func(s *slicerv1alpha1.Slicer) { s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork }, nil),
		Entry("endpoint mode unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.Network.EndpointMode = "Tunnel" },
			rejected("spec.network.endpointMode", "Unsupported value")),
		Entry("host network on loopback", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork
			s.Spec.Network.ListenAddress = "127.0.0.1"
		}, nil),
		Entry("host network on an IPv6 node address", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork
			s.Spec.Network.ListenAddress = "fd00::10"
		}, nil),
		Entry("listen address on the pod network", func(s *slicerv1alpha1.Slicer) { s.Spec.Network.ListenAddress = "127.0.0.1" },
			rejected("spec.network.listenAddress", "applies only to endpointMode HostNetwork")),
		Entry("listen address every IPv4 interface", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork
			s.Spec.Network.ListenAddress = "0.0.0.0"
		}, rejected("spec.network.listenAddress", "not 0.0.0.0 or ::")),
		Entry("listen address every IPv6 interface", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork
			s.Spec.Network.ListenAddress = "::"
		}, rejected("spec.network.listenAddress", "not 0.0.0.0 or ::")),
		Entry("listen address a host name", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork
			s.Spec.Network.ListenAddress = "node-1.example"
		}, rejected("spec.network.listenAddress", "must be an IP address")),
		// defragmentation
		Entry("defragmentation evicts within a cap", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Defragmentation = slicerv1alpha1.DefragmentationSpec{
				Mode: slicerv1alpha1.DefragmentationEvict, MaxMovesPerPlan: 3, MaxEvictions: 3, WindowSeconds: 600,
				NamespaceSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{"team": "batch"},
					MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"dev", "test"}},
						{Key: "pinned", Operator: metav1.LabelSelectorOpDoesNotExist},
					},
				},
			}
		}, nil),
		Entry("defragmentation disabled", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Defragmentation.Mode = slicerv1alpha1.DefragmentationDisabled
		}, nil),
		Entry("defragmentation mode unknown", func(s *slicerv1alpha1.Slicer) { s.Spec.Defragmentation.Mode = "Always" },
			rejected("spec.defragmentation.mode", "Unsupported value")),
		Entry("defragmentation 5 moves per plan", func(s *slicerv1alpha1.Slicer) { s.Spec.Defragmentation.MaxMovesPerPlan = 5 },
			rejected("spec.defragmentation.maxMovesPerPlan", "less than or equal to 4")),
		Entry("defragmentation more moves per plan than evictions per window", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Defragmentation.MaxMovesPerPlan = 3
			s.Spec.Defragmentation.MaxEvictions = 2
		}, rejected("spec.defragmentation.maxMovesPerPlan", "must not exceed maxEvictions")),
		Entry("defragmentation no evictions", func(s *slicerv1alpha1.Slicer) { s.Spec.Defragmentation.MaxEvictions = -1 },
			rejected("spec.defragmentation.maxEvictions", "greater than or equal to 1")),
		Entry("defragmentation 1001 evictions", func(s *slicerv1alpha1.Slicer) { s.Spec.Defragmentation.MaxEvictions = 1001 },
			rejected("spec.defragmentation.maxEvictions", "less than or equal to 1000")),
		Entry("defragmentation window of 59 s", func(s *slicerv1alpha1.Slicer) { s.Spec.Defragmentation.WindowSeconds = 59 },
			rejected("spec.defragmentation.windowSeconds", "greater than or equal to 60")),
		Entry("defragmentation window over a day", func(s *slicerv1alpha1.Slicer) { s.Spec.Defragmentation.WindowSeconds = 86401 },
			rejected("spec.defragmentation.windowSeconds", "less than or equal to 86400")),
		Entry("defragmentation namespace selector with an unknown operator", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Defragmentation.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "team", Operator: "Matches", Values: []string{"a"}},
			}}
		}, rejected("spec.defragmentation.namespaceSelector.matchExpressions", "operator must be In, NotIn, Exists or DoesNotExist")),
		Entry("defragmentation namespace selector In without values", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Defragmentation.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "team", Operator: metav1.LabelSelectorOpIn},
			}}
		}, rejected("spec.defragmentation.namespaceSelector.matchExpressions", "non-empty for In and NotIn")),
		Entry("defragmentation namespace selector Exists with values", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Defragmentation.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "team", Operator: metav1.LabelSelectorOpExists, Values: []string{"a"}},
			}}
		}, rejected("spec.defragmentation.namespaceSelector.matchExpressions", "values must be empty for Exists")),
	)

	It("defaults every section of an empty spec", func() {
		s := validSlicer()
		Expect(k8s.Create(ctx, s, client.DryRunAll)).To(Succeed())
		Expect(s.Spec.Driver.Mode).To(Equal(slicerv1alpha1.DriverModeKMM))
		Expect(s.Spec.Driver.InTreeModulesToRemove).To(Equal([]string{"nouveau"}))
		Expect(s.Spec.NodeSelection.NodeFeatureRule).To(Equal(slicerv1alpha1.FeatureEnabled))
		Expect(s.Spec.Scheduler.Name).To(Equal("slicer-scheduler"))
		Expect(s.Spec.Scheduler.Replicas).To(Equal(int32(2)))
		Expect(s.Spec.Scheduler.SliceReadyTimeoutSeconds).To(Equal(int32(60)))
		Expect(s.Spec.Webhook.FailurePolicy).To(Equal(slicerv1alpha1.FailurePolicyIgnore))
		Expect(s.Spec.Webhook.Replicas).To(Equal(int32(2)))
		Expect(s.Spec.Webhook.TranslateNVIDIAResources).To(Equal(slicerv1alpha1.FeatureEnabled))
		Expect(s.Spec.Webhook.CertificateProvider).To(Equal(slicerv1alpha1.CertificateProviderAuto))
		Expect(s.Spec.Agent.CDIDirectory).To(Equal("/var/run/cdi"))
		Expect(s.Spec.Agent.KubeletRootDir).To(Equal("/var/lib/kubelet"))
		Expect(s.Spec.Agent.OrphanGracePeriodSeconds).To(Equal(int32(300)))
		Expect(s.Spec.Monitoring.ServiceMonitors).To(Equal(slicerv1alpha1.FeatureEnabled))
		Expect(s.Spec.Network.EndpointMode).To(Equal(slicerv1alpha1.EndpointModePodNetwork))
		Expect(s.Spec.Defragmentation.Mode).To(Equal(slicerv1alpha1.DefragmentationEvict))
		Expect(s.Spec.Defragmentation.MaxMovesPerPlan).To(Equal(int32(4)))
		Expect(s.Spec.Defragmentation.MaxEvictions).To(Equal(int32(100)))
		Expect(s.Spec.Defragmentation.WindowSeconds).To(Equal(int32(3600)))
		Expect(s.Spec.Defragmentation.NamespaceSelector).To(BeNil())
		Expect(s.Spec.Uninstall.Policy).To(Equal(slicerv1alpha1.UninstallWait))
		Expect(s.Spec.ControlPlane.AvoidGPUNodes).To(Equal(slicerv1alpha1.AvoidGPUNodesPreferred))
		Expect(s.Spec.Driver.Upgrade).To(Equal(slicerv1alpha1.DriverUpgradeSpec{MaxUnavailable: 1, DrainTimeoutSeconds: 600,
			DrainTimeoutPolicy: slicerv1alpha1.DrainTimeoutWait, LoadTimeoutSeconds: 900, State: slicerv1alpha1.DriverUpgradeRolling}))
		Expect(s.Spec.Priority.CriticalPriorityQuota).To(Equal(slicerv1alpha1.FeatureDisabled))
	})

	It("rejects unknown fields under strict field validation", func() {
		u := map[string]interface{}{
			"apiVersion": "slicer.dev/v1alpha1", "kind": "Slicer",
			"metadata": map[string]interface{}{"name": "default"},
			"spec":     map[string]interface{}{"schedular": map[string]interface{}{"replicas": 2}},
		}
		err := k8s.Create(ctx, unstructuredFrom(u), client.DryRunAll, client.FieldValidation("Strict"))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(`unknown field "spec.schedular"`))
	})
})
