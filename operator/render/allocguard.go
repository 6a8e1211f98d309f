package render

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// AllocationGuardName names the ValidatingAdmissionPolicy (and its binding) that lets only
// the scheduler create SliceAllocations.
const AllocationGuardName = "slicer-allocation-guard"

// SchedulerUsername is the API user the scheduler runs as: its ServiceAccount.
func SchedulerUsername(o Options) string {
	return "system:serviceaccount:" + o.Namespace + ":" + SchedulerName
}

// AllocationGuard renders the policy that lets only the scheduler's ServiceAccount create
// SliceAllocations (docs/design/invariants.md, "Only the scheduler commits a slice"). RBAC
// alone cannot say it: a cluster admin may create anything. An allocation the scheduler did
// not make holds room the agent never realizes for any pod. The spec is immutable (CRD rule),
// so creation is the one write to guard; the agent's finalizer and status writes are updates.
// It is rendered whether or not a scheduler runs: without one, nobody creates allocations.
func AllocationGuard(o Options) []client.Object {
	user := SchedulerUsername(o)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   typeMeta(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy")),
		ObjectMeta: metav1.ObjectMeta{Name: AllocationGuardName, Labels: labels(ComponentScheduler)},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{
							APIGroups:   []string{slicerv1alpha1.GroupVersion.Group},
							APIVersions: []string{"*"},
							Resources:   []string{"sliceallocations"},
							Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("request.userInfo.username == '%s'", user),
				Message: fmt.Sprintf("SliceAllocations are created only by Slicer's scheduler (%s), when it places a pod; "+
					"create the pod instead (it asks for slicer.dev/mig-<profile> or nvidia.com/mig-<profile>) and the scheduler records its slices", user),
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   typeMeta(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding")),
		ObjectMeta: metav1.ObjectMeta{Name: AllocationGuardName, Labels: labels(ComponentScheduler)},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        AllocationGuardName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return []client.Object{policy, binding}
}
