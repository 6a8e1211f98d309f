package render

import (
	"fmt"
	"path"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// Host paths the agent mounts.
const (
	// DefaultKubeletRootDir is the kubelet's default --root-dir (spec.agent.kubeletRootDir).
	DefaultKubeletRootDir = "/var/lib/kubelet"
	EmulatedStateDir      = "/var/lib/slicer"
	defaultCDIDir         = "/var/run/cdi"
	podSecurityPrefix     = "pod-security.kubernetes.io/"
)

// KubeletDirs are the kubelet's directories the agent mounts, each at its host path (the
// kubelet dials the socket paths a DRA plugin registers as given).
type KubeletDirs struct {
	// DevicePlugins holds the kubelet's device-plugin registration socket and the plugins'.
	DevicePlugins string
	// PodResources holds the kubelet's PodResources socket.
	PodResources string
	// Plugins and PluginsRegistry are where a kubelet DRA plugin puts its service socket
	// and its registration socket (DRA frontend only).
	Plugins         string
	PluginsRegistry string
}

// KubeletDirsOf are the kubelet's directories under its root directory.
func KubeletDirsOf(root string) KubeletDirs {
	return KubeletDirs{
		DevicePlugins:   path.Join(root, "device-plugins"),
		PodResources:    path.Join(root, "pod-resources"),
		Plugins:         path.Join(root, "plugins"),
		PluginsRegistry: path.Join(root, "plugins_registry"),
	}
}

// kubeletDirs are the kubelet's directories under spec.agent.kubeletRootDir.
func (o Options) kubeletDirs() KubeletDirs {
	root := o.Slicer.Spec.Agent.KubeletRootDir
	if root == "" {
		root = DefaultKubeletRootDir
	}
	return KubeletDirsOf(root)
}

// AgentNamespace renders the agent's namespace, labelled for the privileged
// Pod Security level (the agent mounts host paths and, with a real driver,
// runs privileged to change MIG geometry). Nothing else runs there.
func AgentNamespace(o Options) *corev1.Namespace {
	l := commonLabels()
	for _, mode := range []string{"enforce", "audit", "warn"} {
		l[podSecurityPrefix+mode] = "privileged"
	}
	if o.Platform.OpenShift {
		// Keep OpenShift's label syncer from lowering the level.
		l["security.openshift.io/scc.podSecurityLabelSync"] = "false"
	}
	return &corev1.Namespace{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion.WithKind("Namespace")),
		ObjectMeta: metav1.ObjectMeta{Name: o.AgentNamespace, Labels: l},
	}
}

// AgentNodeAffinity selects the nodes the agent runs on: NFD's MIG-capable
// label and, in KMM mode, KMM's ready label for the driver Module and no driver upgrade at
// its Driver step (docs/driver-upgrade.md).
func AgentNodeAffinity(o Options) *corev1.NodeAffinity {
	reqs := []corev1.NodeSelectorRequirement{{
		Key: slicerv1alpha1.LabelMIGCapable, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"},
	}}
	if o.driverMode() == slicerv1alpha1.DriverModeKMM {
		reqs = append(reqs, corev1.NodeSelectorRequirement{
			Key: KMMReadyLabel(o.AgentNamespace, ModuleName), Operator: corev1.NodeSelectorOpExists,
		})
	}
	if OrderedUpgrade(o) {
		reqs = append(reqs, agentOffDuringUpgrade())
	}
	return &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}},
	}}
}

// AgentGPUModesFlag is the agent's flag for spec.gpuModes (migapi.GPUModesFlag's value),
// rendered only when the list is not empty.
const AgentGPUModesFlag = "--" + migapi.GPUModesFlagName

// EmulateFlag renders --emulate's value, e.g. "H100-80GB:2,A30-24GB:1".
func EmulateFlag(gpus []slicerv1alpha1.EmulatedGPUs) string {
	parts := make([]string, 0, len(gpus))
	for _, g := range gpus {
		parts = append(parts, fmt.Sprintf("%s:%d", g.Model, g.Count))
	}
	return strings.Join(parts, ",")
}

// Agent renders the agent's namespace, ServiceAccount and DaemonSet.
func Agent(o Options) ([]client.Object, error) {
	a := o.Slicer.Spec.Agent
	// Emulated mode, or KMM mode with emulated GPUs (a test of KMM's driver loading without
	// GPUs: hack/kmm/run.sh).
	emulated := o.driverMode() == slicerv1alpha1.DriverModeEmulated || (o.driverMode() == slicerv1alpha1.DriverModeKMM && len(a.EmulatedGPUs) > 0)
	if emulated && len(a.EmulatedGPUs) == 0 {
		return nil, fmt.Errorf("driver mode %s needs spec.agent.emulatedGPUs", slicerv1alpha1.DriverModeEmulated)
	}
	cdiDir := a.CDIDirectory
	if cdiDir == "" {
		cdiDir = defaultCDIDir
	}
	p := o.Ports
	kd := o.kubeletDirs()
	args := []string{
		"--node-name=$(NODE_NAME)",
		"--cdi-dir=" + cdiDir,
		"--device-plugin-dir=" + kd.DevicePlugins,
		"--pod-resources-socket=" + path.Join(kd.PodResources, "kubelet.sock"),
		"--orphan-grace-period=" + (time.Duration(a.OrphanGracePeriodSeconds) * time.Second).String(),
	}
	args = append(args, listenArgs(o, p.AgentMetrics, p.AgentHealth)...)
	if v, ok := metricsTLSOf(o, ComponentAgent); ok {
		args = append(args, agentCertArgs(v)...)
	}
	mounts := []corev1.VolumeMount{
		{Name: "device-plugins", MountPath: kd.DevicePlugins},
		{Name: "pod-resources", MountPath: kd.PodResources, ReadOnly: true},
		{Name: "cdi", MountPath: cdiDir},
	}
	volumes := []corev1.Volume{
		hostPathVolume("device-plugins", kd.DevicePlugins, corev1.HostPathDirectory),
		hostPathVolume("pod-resources", kd.PodResources, corev1.HostPathDirectory),
		hostPathVolume("cdi", cdiDir, corev1.HostPathDirectoryOrCreate),
	}
	sc := &corev1.SecurityContext{
		// Changing MIG geometry through NVML needs the GPU control devices
		// and CAP_SYS_ADMIN: only the real backend gets them.
		Privileged:               ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(true),
		ReadOnlyRootFilesystem:   ptr.To(true),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if UsesDRA(o) {
		// The kubelet DRA plugin's sockets: its own and the kubelet's registration directory.
		args = append(args, AgentFrontendDRAArg,
			"--dra-plugin-dir="+path.Join(kd.Plugins, migdra.DriverName), "--dra-registry-dir="+kd.PluginsRegistry)
		for _, d := range []struct{ name, path string }{{"dra-plugins", kd.Plugins}, {"dra-registry", kd.PluginsRegistry}} {
			mounts = append(mounts, corev1.VolumeMount{Name: d.name, MountPath: d.path})
			volumes = append(volumes, hostPathVolume(d.name, d.path, corev1.HostPathDirectoryOrCreate))
		}
	}
	// Both frontends switch MIG modes by the policies.
	modes, err := migapi.GPUModesFlag(o.Slicer.Spec.GPUModes)
	if err != nil {
		return nil, err
	}
	if modes != "" {
		args = append(args, AgentGPUModesFlag+"="+modes)
	}
	if emulated {
		args = append(args, "--emulate="+EmulateFlag(a.EmulatedGPUs), "--emulate-state-file="+EmulatedStateDir+"/emulated-gpus.json")
		mounts = append(mounts, corev1.VolumeMount{Name: "state", MountPath: EmulatedStateDir})
		volumes = append(volumes, hostPathVolume("state", EmulatedStateDir, corev1.HostPathDirectoryOrCreate))
		sc = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	tolerations := append([]corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, a.Tolerations...)
	pod := corev1.PodSpec{
		ServiceAccountName: AgentName,
		PriorityClassName:  PriorityClass,
		HostNetwork:        o.hostNetwork(),
		Affinity:           &corev1.Affinity{NodeAffinity: AgentNodeAffinity(o)},
		Tolerations:        tolerations,
		Containers: []corev1.Container{{
			Name:  "agent",
			Image: o.Images.Agent,
			Args:  args,
			Env: append([]corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"},
			}}}, append(o.apiServerEnv(), hostIPEnvVars(o)...)...),
			Ports: []corev1.ContainerPort{
				{Name: "metrics", ContainerPort: p.AgentMetrics, Protocol: corev1.ProtocolTCP},
				{Name: "health", ContainerPort: p.AgentHealth, Protocol: corev1.ProtocolTCP},
			},
			LivenessProbe:   httpProbe("/healthz", "health", healthHost(o), ""),
			ReadinessProbe:  agentReadiness(o),
			Resources:       resources("50m", "64Mi"),
			SecurityContext: sc,
			VolumeMounts:    mounts,
		}},
		Volumes: volumes,
	}
	if o.hostNetwork() {
		pod.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	ds := &appsv1.DaemonSet{
		TypeMeta:   typeMeta(appsv1.SchemeGroupVersion.WithKind("DaemonSet")),
		ObjectMeta: metav1.ObjectMeta{Name: AgentName, Namespace: o.AgentNamespace, Labels: labels(ComponentAgent)},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels(ComponentAgent)},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(ComponentAgent)},
				Spec:       pod,
			},
		},
	}
	return []client.Object{AgentNamespace(o), serviceAccount(o.AgentNamespace, AgentName, ComponentAgent), ds}, nil
}

func hostPathVolume(name, path string, t corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(t)},
	}}
}

// agentReadinessPeriod is how often the kubelet asks the agent whether it is ready: every 2 s
// rather than the API's default 10 s, because a node serves slices again only once its agent
// is seen ready (a driver upgrade's Verify step, docs/driver-upgrade.md "Measured": about 10 s
// of each node's upgrade went on waiting for the next probe; a DaemonSet rollout), and the
// probe is one loopback HTTP request.
const agentReadinessPeriod = 2

func agentReadiness(o Options) *corev1.Probe {
	p := httpProbe("/readyz", "health", healthHost(o), "")
	p.PeriodSeconds = agentReadinessPeriod
	return p
}
