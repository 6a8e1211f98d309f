package render

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// ComponentOperator labels the operator's own objects (its node guard).
const ComponentOperator = "operator"

// OperatorNodeGuardName names the ValidatingAdmissionPolicy (and its binding) that confines
// the operator's Node writes to the GPU operator's deploy labels and Slicer's record of them.
const OperatorNodeGuardName = "slicer-operator-node-guard"

// OperatorNodeMessage is the node guard's answer to an operator write it refuses.
const OperatorNodeMessage = "Slicer's operator may change on a Node only the NVIDIA GPU operator's deploy labels " +
	slicerv1alpha1.LabelGPUOperatorDeployDevicePlugin + " and " + slicerv1alpha1.LabelGPUOperatorDeployMIGManager +
	" and its annotation " + slicerv1alpha1.AnnotationGPUOperatorLabels + ", and the driver upgrade's labels " +
	slicerv1alpha1.LabelDriverUpgrade + " and KMM's version labels of Slicer's Module, and its annotation " +
	slicerv1alpha1.AnnotationDriverUpgradeSince

// OperatorUsername is the API user the operator runs as: its ServiceAccount in the operator
// namespace (config/manager/manager.yaml).
func OperatorUsername(o Options) string {
	return "system:serviceaccount:" + o.Namespace + ":" + slicerv1alpha1.OperatorName
}

// OperatorNodeGuard renders the policy that holds the operator's writes to Nodes to what it
// needs next to the GPU operator (docs/design/threat-model.md): RBAC grants patch on every
// Node and cannot name fields, so this policy refuses any change of the operator's to a
// Node's spec, owner references, finalizers, or to a label or annotation other than
// GPUOperatorLabelKeys and AnnotationGPUOperatorLabels, and the driver upgrade's
// (DriverUpgradeKeys), and any create or delete.
func OperatorNodeGuard(o Options) []client.Object {
	upgradeLabels, upgradeAnnotations := DriverUpgradeKeys(o)
	keys := quoted(append(append([]string(nil), GPUOperatorLabelKeys...), upgradeLabels...))
	same := func(field, allowed string) string {
		return fmt.Sprintf("variables.old%[1]s.all(k, k in [%[2]s] || (k in variables.new%[1]s && variables.new%[1]s[k] == variables.old%[1]s[k])) && "+
			"variables.new%[1]s.all(k, k in [%[2]s] || k in variables.old%[1]s)", field, allowed)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   typeMeta(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy")),
		ObjectMeta: metav1.ObjectMeta{Name: OperatorNodeGuardName, Labels: labels(ComponentOperator)},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy:   ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{writes("", admissionregistrationv1.ClusterScope, "nodes")},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "is-slicer-operator",
				Expression: fmt.Sprintf("request.userInfo.username == '%s'", OperatorUsername(o)),
			}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "oldLabels", Expression: "request.operation == 'UPDATE' ? oldObject.metadata.?labels.orValue({}) : {}"},
				{Name: "newLabels", Expression: "request.operation == 'UPDATE' ? object.metadata.?labels.orValue({}) : {}"},
				{Name: "oldAnnotations", Expression: "request.operation == 'UPDATE' ? oldObject.metadata.?annotations.orValue({}) : {}"},
				{Name: "newAnnotations", Expression: "request.operation == 'UPDATE' ? object.metadata.?annotations.orValue({}) : {}"},
			},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression: "request.operation == 'UPDATE' && " +
						"object.spec == oldObject.spec && " +
						"object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([]) && " +
						"object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([]) && " +
						same("Labels", keys) + " && " +
						same("Annotations", quoted(append([]string{slicerv1alpha1.AnnotationGPUOperatorLabels}, upgradeAnnotations...))),
					Message: OperatorNodeMessage,
					Reason:  ptr.To(metav1.StatusReasonForbidden),
				},
			},
		},
	}
	return []client.Object{policy, policyBinding(OperatorNodeGuardName, ComponentOperator)}
}
