package config

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/podrequest"
)

// RenderValidatingAdmissionPolicy renders the policy (and its binding) that holds the final
// state of a MIG pod to what Slicer schedules, so that with the webhook down and failure
// policy Ignore nothing unscheduled slips through, and nothing else is blocked:
//
//   - nvidia.com/mig-* is rejected where the webhook would have translated it (not in
//     namespaces labelled slicer.dev/translate-nvidia-resources=disabled, nor anywhere
//     when translation is disabled cluster-wide);
//   - a pod with slicer.dev/mig-* must have Slicer's schedulerName, no spec.nodeName and
//     no slicer.dev/ labels or annotations;
//   - an update of such a pod may not add or change a slicer.dev/ label or annotation
//     (reservedKeysOnUpdate): what is refused at creation is refused later too;
//   - where the webhook routes whole GPUs (nvidia.com/gpu) to the Slicer scheduler, the
//     namespaces nvidia.com/mig-* is translated in, such a pod must have Slicer's
//     schedulerName and no spec.nodeName: a Slicer node advertises a GPU from the moment
//     its allocation is Ready until its pod is admitted, and a pod another scheduler or a
//     pinned node sends there could be handed it. Elsewhere nvidia.com/gpu stays NVIDIA's.
//
// The rules of the pod's creation hold only on CREATE: a bound pod has spec.nodeName, and a
// pod admitted before Slicer was installed may ask for nvidia.com/mig-* anywhere.
//
// It matches the same pods as the webhook (match conditions) in every namespace, and has no
// object selector: a pod cannot escape it by forging Slicer's component label, nor by being
// created in a namespace the webhook leaves alone (kube-*, openshift-*, Slicer's own), where
// it could otherwise pin a node and ask for slicer.dev/mig-* directly; Slicer's own pods
// never ask for MIG, so they are never matched. The webhook needs the exclusions (a
// webhook that cannot be reached must not hold up the system's own pods); an admission
// policy, evaluated in the apiserver, does not. nvidia.com/mig-* stays NVIDIA's where the
// webhook does not translate it, excluded namespaces included.
func RenderValidatingAdmissionPolicy(o Options) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	o = o.withDefaults()
	return renderPolicy(o, []admissionregistrationv1.Validation{
		{
			Expression: "!(variables.nvidiaMIG && variables.translated)",
			Message: fmt.Sprintf("the pod asks for nvidia.com/mig-* but Slicer's webhook did not rewrite it (is the webhook running?); "+
				"Slicer serves MIG slices as slicer.dev/mig-<profile> placed by the %q scheduler: retry when the webhook is back, "+
				"or write the pod that way, or label the namespace %s=%s to leave nvidia.com/mig-* to NVIDIA's device plugin",
				o.SchedulerName, slicerv1alpha1.LabelTranslateNVIDIAResources, TranslateDisabled),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
		{
			Expression: fmt.Sprintf("!variables.slicerMIG || (has(object.spec.schedulerName) && object.spec.schedulerName == '%s')", o.SchedulerName),
			Message: fmt.Sprintf("the pod asks for slicer.dev/mig-* slices, which only the Slicer scheduler places, but spec.schedulerName is not %q "+
				"(Slicer's webhook sets it; is the webhook running?): set spec.schedulerName: %s", o.SchedulerName, o.SchedulerName),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
		{
			Expression: "!variables.slicerMIG || !has(object.spec.nodeName) || object.spec.nodeName == ''",
			Message:    "the pod asks for slicer.dev/mig-* slices but pins spec.nodeName; only the Slicer scheduler may choose the node and the slice: remove spec.nodeName (use a nodeSelector or node affinity instead)",
			Reason:     ptr.To(metav1.StatusReasonForbidden),
		},
		{
			Expression: fmt.Sprintf("!(variables.wholeGPU && variables.translated) || (has(object.spec.schedulerName) && object.spec.schedulerName == '%s' && (!has(object.spec.nodeName) || object.spec.nodeName == ''))", o.SchedulerName),
			Message: fmt.Sprintf("the pod asks for whole GPUs (%s) in a namespace where the %q scheduler places them, but its spec.schedulerName is not %q or it pins spec.nodeName "+
				"(Slicer's webhook sets the scheduler; is the webhook running?): set spec.schedulerName: %s and use a nodeSelector or node affinity instead of spec.nodeName, "+
				"or label the namespace %s=%s to leave %s to NVIDIA's device plugin",
				podrequest.WholeGPUResource, o.SchedulerName, o.SchedulerName, o.SchedulerName, slicerv1alpha1.LabelTranslateNVIDIAResources, TranslateDisabled, podrequest.WholeGPUResource),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
		{
			Expression: "!variables.slicerMIG || (" + noReservedKeys("labels", nil) + " && " + noReservedKeys("annotations", slicerv1alpha1.UserPodAnnotations) + ")",
			Message:    fmt.Sprintf("the pod asks for MIG slices and carries labels or annotations under %s, which are reserved for Slicer's own allocation data (only the annotations %s are yours to set): remove them", slicerv1alpha1.DomainPrefix, strings.Join(slicerv1alpha1.UserPodAnnotations, ", ")),
			Reason:     ptr.To(metav1.StatusReasonForbidden),
		},
	})
}

// quotedKeys is keys as a CEL list's elements.
func quotedKeys(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = "'" + k + "'"
	}
	return strings.Join(quoted, ", ")
}

// noReservedKeys is slicerv1alpha1.ReservedPodKey in CEL: no key of the object's metadata
// field (labels or annotations) is under the domain prefix, but the allowed ones.
func noReservedKeys(field string, allowed []string) string {
	return fmt.Sprintf("(!has(object.metadata.%[1]s) || !object.metadata.%[1]s.exists(k, k.startsWith('%[2]s') && !(k in [%[3]s])))",
		field, slicerv1alpha1.DomainPrefix, quotedKeys(allowed))
}

// noReservedKeyWritten is the same on UPDATE: every reserved key of the new object's field
// was in the old object with the same value. Removing one is allowed (nothing of Slicer's
// reads such keys on a pod); so is keeping one a pod somehow had.
func noReservedKeyWritten(field string, allowed []string) string {
	return fmt.Sprintf("object.metadata.?%[1]s.orValue({}).all(k, !k.startsWith('%[2]s') || k in [%[3]s] || "+
		"(k in oldObject.metadata.?%[1]s.orValue({}) && oldObject.metadata.%[1]s[k] == object.metadata.%[1]s[k]))",
		field, slicerv1alpha1.DomainPrefix, quotedKeys(allowed))
}

// reservedKeysOnUpdate refuses an update of a MIG pod that adds or changes a slicer.dev/
// label or annotation (but the user's annotations): the keys its creation may not carry
// (ReservedPodKey), whoever writes them. No Slicer component writes such a key on a MIG pod:
// the webhook sets none, the scheduler records its plans in a pod condition through
// pods/status, which this policy does not match, and Slicer's own pods, which carry
// slicer.dev/component, never ask for MIG.
func reservedKeysOnUpdate() admissionregistrationv1.Validation {
	return admissionregistrationv1.Validation{
		Expression: "!variables.updating || !variables.slicerMIG || (" + noReservedKeyWritten("labels", nil) + " && " + noReservedKeyWritten("annotations", slicerv1alpha1.UserPodAnnotations) + ")",
		Message: fmt.Sprintf("the update adds or changes a label or annotation under %s on a pod that asks for MIG slices; those keys are reserved for Slicer's own allocation data "+
			"(only the annotations %s are yours to set): leave them out", slicerv1alpha1.DomainPrefix, strings.Join(slicerv1alpha1.UserPodAnnotations, ", ")),
		Reason: ptr.To(metav1.StatusReasonForbidden),
	}
}

// RenderSchedulerUnavailablePolicy renders the policy (and its binding), under the same
// name as RenderValidatingAdmissionPolicy's, for when Slicer runs no scheduler (e.g. the
// cluster's Kubernetes minor has no Slicer scheduler build). Then the operator registers
// no MutatingWebhookConfiguration, nothing is sent to a scheduler that does not exist,
// and every pod Slicer would have placed is rejected at creation with why, instead of
// waiting Pending forever: slicer.dev/mig-* everywhere, nvidia.com/mig-* where the webhook
// would have translated it (namespaces that leave it to NVIDIA's device plugin keep it).
func RenderSchedulerUnavailablePolicy(o Options, why string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	o = o.withDefaults()
	return renderPolicy(o, []admissionregistrationv1.Validation{{
		Expression: "!variables.slicerMIG && !(variables.nvidiaMIG && variables.translated)",
		Message: fmt.Sprintf("Slicer cannot place MIG slices in this cluster now: %s. Pods that ask for slicer.dev/mig-* "+
			"(or nvidia.com/mig-*, which Slicer translates) are rejected until it does; label the namespace %s=%s to leave nvidia.com/mig-* to NVIDIA's device plugin",
			why, slicerv1alpha1.LabelTranslateNVIDIAResources, TranslateDisabled),
		Reason: ptr.To(metav1.StatusReasonForbidden),
	}})
}

// renderPolicy renders the policy with the given validations of a pod's creation (each
// holds on CREATE only) and its binding; reservedKeysOnUpdate holds on UPDATE whatever the
// policy enforces at creation. The matching and the variables are the same whatever the
// policy enforces.
func renderPolicy(o Options, onCreate []admissionregistrationv1.Validation) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	validations := make([]admissionregistrationv1.Validation, 0, len(onCreate)+1)
	for _, v := range onCreate {
		v.Expression = "variables.updating || (" + v.Expression + ")"
		validations = append(validations, v)
	}
	validations = append(validations, reservedKeysOnUpdate())
	name := ObjectName(o)
	labels := map[string]string{LabelPartOf: PartOf}
	prefixes := []string{mig.ResourcePrefix}
	translated := "false"
	var names []string
	if o.TranslateNVIDIA == TranslateEnabled {
		prefixes = append(prefixes, mig.NVIDIAResourcePrefix)
		names = append(names, string(podrequest.WholeGPUResource))
		translated = fmt.Sprintf(`%[3]s && !(request.namespace in [%[4]s]) && (!has(namespaceObject.metadata.labels) || !('%[1]s' in namespaceObject.metadata.labels) || namespaceObject.metadata.labels['%[1]s'] != '%[2]s')`,
			slicerv1alpha1.LabelTranslateNVIDIAResources, TranslateDisabled, celNotSystem, celList(excludedNamespaces(o).MatchExpressions[0].Values))
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
							Scope: ptr.To(admissionregistrationv1.NamespacedScope),
						},
					},
				}},
			},
			MatchConditions: policyMatchConditions(prefixes, names),
			Variables: []admissionregistrationv1.Variable{
				{Name: "slicerMIG", Expression: celMentions(mig.ResourcePrefix)},
				{Name: "nvidiaMIG", Expression: celMentions(mig.NVIDIAResourcePrefix)},
				{Name: "translated", Expression: translated},
				{Name: "updating", Expression: "request.operation == 'UPDATE'"},
				{Name: "wholeGPU", Expression: celNames(string(podrequest.WholeGPUResource))},
			},
			Validations: validations,
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}
