package render

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// DeviceAccessGuardName names the ValidatingAdmissionPolicy (and its binding) that refuses
// pods selecting NVIDIA devices themselves.
const DeviceAccessGuardName = "slicer-device-access"

// DeviceSelectionEnv are the environment variables with which a container asks the NVIDIA
// container runtime (in its legacy mode, or in CDI mode, which turns their values into CDI
// device names) for devices: GPUs and MIG devices, the MIG configuration and monitoring
// capabilities (whoever holds the first may create and destroy MIG instances), IMEX channels.
// Slicer's device plugin sets NVIDIA_VISIBLE_DEVICES itself, in the container runtime's
// edits (device-plugin/cdi), never in the pod.
var DeviceSelectionEnv = []string{"NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES", "NVIDIA_IMEX_CHANNELS"}

// deviceEnvHarmless are the values of DeviceSelectionEnv that select no device ("void": as
// if unset; empty: the same).
var deviceEnvHarmless = []string{"", "void"}

// CDIAnnotationPrefix is the prefix of the pod annotations with which container runtimes
// inject CDI devices (tags.cncf.io/container-device-interface pkg/cdi AnnotationPrefix).
const CDIAnnotationPrefix = "cdi.k8s.io/"

// DeviceEnvMessage and DeviceAnnotationMessage start the device-access guard's answers.
const (
	DeviceEnvMessage        = "the pod selects NVIDIA devices itself"
	DeviceAnnotationMessage = "the pod asks the container runtime for CDI devices itself"
)

// deviceAdvice ends both answers: what to do instead.
var deviceAdvice = fmt.Sprintf("on this cluster GPUs are reached only through Slicer, which accounts for every slice: "+
	"ask for slicer.dev/mig-<profile> (or nvidia.com/mig-<profile>) in the container's resources instead, and the device plugin sets the devices; "+
	"GPU system software goes in a namespace labelled %s=allowed by a cluster administrator", slicerv1alpha1.LabelDirectGPUAccess)

// DeviceAccessGuard renders the policy that refuses pods which reach GPUs around Slicer
// (docs/design/threat-model.md, docs/install.md): a container that sets one of
// DeviceSelectionEnv to a value that selects devices (or from a reference, whose value
// admission cannot see), or a pod annotation under CDIAnnotationPrefix. It applies in every
// namespace but those labelled slicer.dev/direct-gpu-access=allowed (namespace labels are
// the cluster administrator's), to every pod but mirror pods (the node's own static pods),
// at creation and to what an update adds: ephemeral containers, CDI annotations. What
// admission cannot see (an image's ENV, envFrom) the node's runtime configuration refuses.
func DeviceAccessGuard(o Options) []client.Object {
	selects := fmt.Sprintf("c.?env.orValue([]).exists(e, e.name in [%s] && (has(e.valueFrom) || !(e.?value.orValue('') in [%s])))",
		quoted(DeviceSelectionEnv), quoted(deviceEnvHarmless))
	all := func(obj string) string {
		var lists []string
		for _, l := range []string{"containers", "initContainers", "ephemeralContainers"} {
			lists = append(lists, fmt.Sprintf("%s.spec.?%s.orValue([])", obj, l))
		}
		return strings.Join(lists, " + ")
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   typeMeta(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy")),
		ObjectMeta: metav1.ObjectMeta{Name: DeviceAccessGuardName, Labels: labels(ComponentAgent)},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: slicerv1alpha1.LabelDirectGPUAccess, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"allowed"},
				}}},
				ObjectSelector: &metav1.LabelSelector{},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "pods/ephemeralcontainers"},
							Scope: ptr.To(admissionregistrationv1.NamespacedScope),
						},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "not-a-mirror-pod",
				Expression: fmt.Sprintf("!has(object.metadata.annotations) || !('%s' in object.metadata.annotations)", corev1.MirrorPodAnnotationKey),
			}},
			Variables: []admissionregistrationv1.Variable{
				// The containers this request adds: all at creation, new ephemeral ones later.
				{Name: "added", Expression: fmt.Sprintf("request.operation == 'CREATE' ? %s : "+
					"object.spec.?ephemeralContainers.orValue([]).filter(c, !oldObject.spec.?ephemeralContainers.orValue([]).exists(p, p.name == c.name))", all("object"))},
				{Name: "selecting", Expression: fmt.Sprintf("variables.added.filter(c, %s).map(c, c.name)", selects)},
				// The CDI annotations this request adds or changes.
				{Name: "cdi", Expression: fmt.Sprintf("object.metadata.?annotations.orValue({}).filter(k, k.startsWith('%s') && "+
					"(request.operation == 'CREATE' || oldObject.metadata.?annotations[?k].orValue('') != object.metadata.annotations[k]))", CDIAnnotationPrefix)},
			},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression: "size(variables.selecting) == 0",
					MessageExpression: fmt.Sprintf(`"%s: container " + variables.selecting[0] + " sets %s itself (a reference counts, whatever it holds; only %s select nothing); %s"`,
						DeviceEnvMessage, strings.Join(DeviceSelectionEnv, ", "), `\"\" and \"void\"`, deviceAdvice),
					Message: DeviceEnvMessage + "; " + deviceAdvice,
					Reason:  ptr.To(metav1.StatusReasonForbidden),
				},
				{
					Expression:        "size(variables.cdi) == 0",
					MessageExpression: fmt.Sprintf(`"%s: annotation " + variables.cdi[0] + "; %s"`, DeviceAnnotationMessage, deviceAdvice),
					Message:           DeviceAnnotationMessage + "; " + deviceAdvice,
					Reason:            ptr.To(metav1.StatusReasonForbidden),
				},
			},
		},
	}
	return []client.Object{policy, policyBinding(DeviceAccessGuardName, ComponentAgent)}
}
