package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// KMM's ordered upgrade (docs/design/kmm.md, "Ordered upgrade"; in the KMM module
// internal/controllers/module_nmc_reconciler.go, prepareNodeSchedulingData, and
// node_label_module_version_reconciler.go): a Module with spec.moduleLoader.container.version
// runs, on a node, the version its module-version label names. When the Module's version
// changes, KMM keeps the old one on every node whose label still names it; once the label
// names the new one, KMM drops its worker-pod label (unloading the old driver), sets it to
// the new version once the ready label is gone, and loads the new driver.

// kmmLabelDomain is the domain of KMM's node labels.
const kmmLabelDomain = "kmm.node.kubernetes.io/"

// KMMModuleVersionLabel is the node label that asks KMM for a version of the Module
// namespace/module (KMM's internal/utils/kmmlabels.go, GetModuleVersionLabelName): the
// operator's to set.
func KMMModuleVersionLabel(namespace, module string) string {
	return kmmLabelDomain + "version-module." + namespace + "." + module
}

// KMMWorkerVersionLabel is the node label with which KMM runs a version of the Module
// (GetWorkerPodVersionLabelName): KMM's. The operator writes it once, when it first versions
// a Module KMM already loaded on the node (driverupgrade.Want.WorkerVersion).
func KMMWorkerVersionLabel(namespace, module string) string {
	return "beta." + kmmLabelDomain + "version-worker-pod." + namespace + "." + module
}

// kmmDevicePluginVersionLabel is the longest of KMM's version labels
// (GetDevicePluginVersionLabelName).
func kmmDevicePluginVersionLabel(namespace, module string) string {
	return "beta." + kmmLabelDomain + "version-device-plugin." + namespace + "." + module
}

// OrderedUpgrade reports whether a change of the driver goes node by node: in driver mode
// KMM, when KMM's version labels can name the Module (a label name has at most 63
// characters after its domain, which bounds the agent namespace to 27).
func OrderedUpgrade(o Options) bool {
	if o.driverMode() != slicerv1alpha1.DriverModeKMM {
		return false
	}
	_, name, _ := strings.Cut(kmmDevicePluginVersionLabel(o.AgentNamespace, ModuleName), "/")
	return len(name) <= 63
}

// ModuleVersion is the version of a Module's loader settings: a digest of every field of
// spec.moduleLoader.container but version itself. Any change KMM would load (image, kernel
// mappings, build, signing, modprobe settings, modules to remove) is a new version, and
// reverting the spec returns to the old one, so a rollback is one more ordered upgrade.
func ModuleVersion(c kmmv1beta1.ModuleLoaderContainerSpec) string {
	c.Version = ""
	raw, err := json.Marshal(c)
	if err != nil {
		panic("render: marshal a ModuleLoaderContainerSpec: " + err.Error()) // plain data
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:12]
}

// DriverVersion is the version Module(o) renders ("" when the upgrade is not ordered).
func DriverVersion(o Options) (string, error) {
	m, err := Module(o)
	if err != nil {
		return "", err
	}
	return m.Spec.ModuleLoader.Container.Version, nil
}

// DriverUpgradeKeys are the node labels and annotations the driver upgrade writes (by
// server-side apply of these keys alone: controller/driverupgrade_write.go), for the
// operator's node guard (OperatorNodeGuard).
func DriverUpgradeKeys(o Options) (labels, annotations []string) {
	return []string{
			slicerv1alpha1.LabelDriverUpgrade,
			KMMModuleVersionLabel(o.AgentNamespace, ModuleName),
			KMMWorkerVersionLabel(o.AgentNamespace, ModuleName),
		},
		[]string{slicerv1alpha1.AnnotationDriverUpgradeSince}
}

// agentOffDuringUpgrade is the agent's node affinity term that takes it off a node at the
// upgrade's Driver step, so that nothing holds the GPUs while KMM swaps the driver.
func agentOffDuringUpgrade() corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{
		Key: slicerv1alpha1.LabelDriverUpgrade, Operator: corev1.NodeSelectorOpNotIn,
		Values: []string{string(slicerv1alpha1.DriverUpgradeDriver)},
	}
}

// DriverUpgradeTaintPrefix starts the names of the DeviceTaintRules that fence a node under a
// driver upgrade in the DRA frontend.
const DriverUpgradeTaintPrefix = "slicer-driver-upgrade-"

// DriverUpgradeTaintRule renders the DeviceTaintRule that keeps the stock scheduler from
// allocating the devices of Slicer's DRA driver on a node under a driver upgrade (the
// driver's pool is its node): NoSchedule, so claims already allocated keep their devices until
// the drain evicts their pods (NoExecute would delete them, past their disruption budgets).
// The device-plugin frontend's fence is the node label the scheduler reads (scheduler/snapshot).
func DriverUpgradeTaintRule(node string) *resourceapi.DeviceTaintRule {
	name := DriverUpgradeTaintPrefix + node
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(node))
		name = name[:253-17] + "-" + hex.EncodeToString(sum[:])[:16]
	}
	return &resourceapi.DeviceTaintRule{
		TypeMeta:   typeMeta(resourceapi.SchemeGroupVersion.WithKind("DeviceTaintRule")),
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels(ComponentDRA)},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(migdra.DriverName), Pool: ptr.To(node)},
			Taint: resourceapi.DeviceTaint{
				Key: slicerv1alpha1.LabelDriverUpgrade, Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule,
			},
		},
	}
}
