package render

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// AgentNodeGuardName names the ValidatingAdmissionPolicy (and its binding) that confines the
// node agent's writes to its own node.
const AgentNodeGuardName = "slicer-agent-node-guard"

// NodeNameExtra is the user extra the kube-apiserver sets on a request made with a
// ServiceAccount token bound to a pod: the name of the pod's node (k8s.io/apiserver
// pkg/authentication/serviceaccount NodeNameKey; set by k8s.io/kubernetes
// pkg/serviceaccount/claims.go under the ServiceAccountTokenPodNodeInfo feature, GA and
// locked on since 1.32).
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// AgentNoNodeMessage is the node guard's answer to an agent request that names no node.
const AgentNoNodeMessage = "Slicer's agent writes only with the ServiceAccount token of a pod bound to a node " +
	"(the token's " + NodeNameExtra + " extra): this request names no node"

// AgentForeignNodeMessage starts the node guard's answer to an agent write to another
// node's object.
const AgentForeignNodeMessage = "Slicer's agent may write only its own node's objects"

// AgentNodeGuard renders the policy that refuses every write of the agent's ServiceAccount
// to an object that is not its node's (docs/design/threat-model.md): one node's
// credentials must not reach any other node's GPUs. RBAC cannot say it, since the agents of
// all nodes share one ServiceAccount; the token of each agent pod names its node. The
// objects and what ties each to a node:
//
//   - SliceAllocations and their status: spec.nodeName and the slicer.dev/node label where
//     there is one (the old object's and the new one's alike, so an allocation is neither
//     taken over nor given away);
//   - NodeAccelerators and their status: the name and spec.nodeName;
//   - ResourceSlices (DRA frontend): spec.nodeName; a slice of no node (allNodes, a node
//     selector) is nobody's.
//
// A request of the agent's ServiceAccount that names no node (a legacy Secret token, say)
// is refused outright.
func AgentNodeGuard(o Options) []client.Object {
	// nodesOf lists the node names an object carries; every one must be the caller's.
	// (string(): a list literal's elements must have one type.)
	nodesOf := fmt.Sprintf("request.resource.resource == 'nodeaccelerators' ? [string(o.metadata.name), string(o.?spec.?nodeName.orValue(o.metadata.name))] : "+
		"request.resource.resource == 'sliceallocations' ? [string(o.?spec.?nodeName.orValue('')), string(o.metadata.?labels[?'%s'].orValue(o.?spec.?nodeName.orValue('')))] : "+
		"[string(o.?spec.?nodeName.orValue(''))]", slicerv1alpha1.LabelNode)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   typeMeta(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy")),
		ObjectMeta: metav1.ObjectMeta{Name: AgentNodeGuardName, Labels: labels(ComponentAgent)},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
					writes(slicerv1alpha1.GroupVersion.Group, admissionregistrationv1.NamespacedScope, "sliceallocations", "sliceallocations/status"),
					writes(slicerv1alpha1.GroupVersion.Group, admissionregistrationv1.ClusterScope, "nodeaccelerators", "nodeaccelerators/status"),
					writes("resource.k8s.io", admissionregistrationv1.ClusterScope, "resourceslices"),
				},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "is-slicer-agent",
				Expression: fmt.Sprintf("request.userInfo.username == '%s'", AgentUsername(o)),
			}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "callerNode", Expression: fmt.Sprintf("request.userInfo.?extra[?'%s'][?0].orValue('')", NodeNameExtra)},
				{Name: "objects", Expression: "request.operation == 'CREATE' ? [object] : request.operation == 'DELETE' ? [oldObject] : [oldObject, object]"},
				// The first node name of the objects that is not the caller's ('' for none).
				{Name: "foreign", Expression: fmt.Sprintf("variables.objects.map(o, %s).filter(ns, ns.exists(n, n != variables.callerNode)).map(ns, ns.filter(n, n != variables.callerNode)[0])", nodesOf)},
			},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression: "variables.callerNode != ''",
					Message:    AgentNoNodeMessage,
					Reason:     ptr.To(metav1.StatusReasonForbidden),
				},
				{
					Expression: "size(variables.foreign) == 0",
					MessageExpression: fmt.Sprintf(`"%s: the agent on node '" + variables.callerNode + "' may not write " + request.resource.resource + `+
						`(variables.foreign[0] == '' ? " of no node" : " of node '" + variables.foreign[0] + "'")`, AgentForeignNodeMessage),
					Message: AgentForeignNodeMessage,
					Reason:  ptr.To(metav1.StatusReasonForbidden),
				},
			},
		},
	}
	return []client.Object{policy, policyBinding(AgentNodeGuardName, ComponentAgent)}
}

// writes matches create, update (patch) and delete of the resources of one API group.
func writes(group string, scope admissionregistrationv1.ScopeType, resources ...string) admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{group},
				APIVersions: []string{"*"},
				Resources:   resources,
				Scope:       ptr.To(scope),
			},
		},
	}
}
