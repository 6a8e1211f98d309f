package render

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// AllocationGuardName names the ValidatingAdmissionPolicy (and its binding) that lets only
// Slicer write SliceAllocations.
const AllocationGuardName = "slicer-allocation-guard"

// Users outside Slicer that may delete SliceAllocations (and change metadata that is not
// Slicer's on them): kube-controller-manager's garbage collector and namespace controller,
// each under its own ServiceAccount (--use-service-account-credentials, as kubeadm runs it)
// or all under the controller manager's one identity. The names are those of
// k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy (controller_policy.go)
// and pkg/controlplane (the system:kube-controller-manager user).
var kubeCollectors = []string{
	"system:serviceaccount:kube-system:generic-garbage-collector",
	"system:serviceaccount:kube-system:namespace-controller",
	"system:kube-controller-manager",
}

// SuperuserGroup is the group RBAC never limits (k8s.io/apiserver pkg/authentication/user
// SystemPrivilegedGroup). Its members may delete an allocation and remove the agent's
// finalizer from one that is already being deleted: docs/runbooks/SlicerMIGSliceStuck.md's
// last resort when a node is gone for good.
const SuperuserGroup = "system:masters"

// SchedulerUsername is the API user the scheduler runs as: its ServiceAccount.
func SchedulerUsername(o Options) string {
	return "system:serviceaccount:" + o.Namespace + ":" + SchedulerName
}

// AgentUsername is the API user the node agent runs as: its ServiceAccount.
func AgentUsername(o Options) string {
	return "system:serviceaccount:" + o.AgentNamespace + ":" + AgentName
}

// Guards are the admission policies that hold Slicer's objects to their writers, rendered
// for both frontends (with RBAC, so they are applied and removed with it).
func Guards(o Options) []client.Object {
	objs := AllocationGuard(o)
	objs = append(objs, AgentNodeGuard(o)...)
	objs = append(objs, OperatorNodeGuard(o)...)
	return append(objs, DeviceAccessGuard(o)...)
}

// Messages of the allocation guard, one per operation.
func allocationCreateMessage(o Options) string {
	return fmt.Sprintf("SliceAllocations are created only by Slicer's scheduler (%s), when it places a pod; "+
		"create the pod instead (it asks for slicer.dev/mig-<profile> or nvidia.com/mig-<profile>) and the scheduler records its slices", SchedulerUsername(o))
}

// AllocationDeleteMessage is the guard's answer to a delete it refuses.
const AllocationDeleteMessage = "SliceAllocations are deleted only by Slicer (its scheduler, or the agent of the allocation's node once the pod is gone) " +
	"and by Kubernetes' garbage collector and namespace controller: delete the pod instead, and the agent releases its slice"

// AllocationUpdateMessage is the guard's answer to a change it refuses.
const AllocationUpdateMessage = "SliceAllocations are changed only by the agent of the allocation's node (its finalizer and status); " +
	"the labels slicer.dev/node and slicer.dev/pod-uid are the scheduler's and never change: delete the pod instead, and the agent releases its slice"

// AllocationGuard renders the policy that lets only Slicer write SliceAllocations
// (docs/design/threat-model.md). RBAC alone cannot say it: a cluster admin may create
// anything, and OLM aggregates write access to every CRD it installs into the admin and
// edit roles of every namespace. An allocation the scheduler did not make holds room the
// agent never realizes for any pod; one whose finalizer, labels or status a tenant changes,
// or that a tenant deletes, leaves its MIG instance on the GPU while the scheduler counts
// the room free.
//
//   - create: the scheduler only;
//   - delete: the scheduler, the agent (AgentNodeGuard confines it to its node), the garbage
//     collector and namespace controller (the pod's owner reference; a deleted namespace),
//     and the superusers;
//   - update (patch) and status: the agent; the collectors and superusers may change other
//     metadata (owner references, their own finalizers) but not Slicer's labels, finalizer
//     or status, except that a superuser may remove the finalizer of an allocation already
//     being deleted. Nobody changes the labels slicer.dev/node and slicer.dev/pod-uid.
//
// It is rendered whether or not a scheduler runs: without one, nobody creates allocations.
func AllocationGuard(o Options) []client.Object {
	sliceKept := func(field string) string {
		return fmt.Sprintf("object.metadata.?labels[?'%[1]s'].orValue('') == oldObject.metadata.?labels[?'%[1]s'].orValue('')", field)
	}
	finalizer := func(obj string) string {
		return fmt.Sprintf("('%s' in %s.metadata.?finalizers.orValue([]))", slicerv1alpha1.AllocationFinalizer, obj)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   typeMeta(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy")),
		ObjectMeta: metav1.ObjectMeta{Name: AllocationGuardName, Labels: labels(ComponentScheduler)},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
						Rule: admissionregistrationv1.Rule{
							APIGroups:   []string{slicerv1alpha1.GroupVersion.Group},
							APIVersions: []string{"*"},
							Resources:   []string{"sliceallocations", "sliceallocations/status"},
							Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
						},
					},
				}},
			},
			Variables: []admissionregistrationv1.Variable{
				{Name: "scheduler", Expression: fmt.Sprintf("request.userInfo.username == '%s'", SchedulerUsername(o))},
				{Name: "agent", Expression: fmt.Sprintf("request.userInfo.username == '%s'", AgentUsername(o))},
				{Name: "collector", Expression: fmt.Sprintf("request.userInfo.username in [%s]", quoted(kubeCollectors))},
				{Name: "superuser", Expression: fmt.Sprintf("'%s' in request.userInfo.?groups.orValue([])", SuperuserGroup)},
				// Only meaningful on UPDATE (oldObject is null otherwise).
				{Name: "labelsKept", Expression: sliceKept(slicerv1alpha1.LabelNode) + " && " + sliceKept(slicerv1alpha1.LabelPodUID)},
				{Name: "statusKept", Expression: "has(object.status) == has(oldObject.status) && (!has(object.status) || object.status == oldObject.status)"},
				{Name: "finalizerKept", Expression: finalizer("object") + " == " + finalizer("oldObject")},
			},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression: "request.operation != 'CREATE' || variables.scheduler",
					Message:    allocationCreateMessage(o),
					Reason:     ptr.To(metav1.StatusReasonForbidden),
				},
				{
					Expression: "request.operation != 'DELETE' || variables.scheduler || variables.agent || variables.collector || variables.superuser",
					Message:    AllocationDeleteMessage,
					Reason:     ptr.To(metav1.StatusReasonForbidden),
				},
				{
					Expression: "request.operation != 'UPDATE' || (variables.labelsKept && (variables.agent || " +
						"((variables.collector || variables.superuser) && variables.statusKept && " +
						"(variables.finalizerKept || (variables.superuser && has(oldObject.metadata.deletionTimestamp))))))",
					Message: AllocationUpdateMessage,
					Reason:  ptr.To(metav1.StatusReasonForbidden),
				},
			},
		},
	}
	return []client.Object{policy, policyBinding(AllocationGuardName, ComponentScheduler)}
}

func policyBinding(name, component string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   typeMeta(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding")),
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels(component)},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}

// quoted is a CEL list body of string literals (the values hold no quote).
func quoted(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = "'" + v + "'"
	}
	return strings.Join(q, ", ")
}
