package render

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// PriorityClass is the priority class of every Slicer pod: the scheduler, the webhook, the
// agent and the operator (config/manager/manager.yaml). Its value, 2000001000, is the highest
// any pod can have: a PriorityClass of a user may not exceed 1000000000 (k8s.io/kubernetes
// pkg/apis/scheduling/types.go, HighestUserDefinablePriority), and the only classes above are
// this one and system-cluster-critical (2000000000). A pod preempts only pods of strictly
// lower priority, in kube-scheduler (pkg/scheduler/framework/plugins/defaultpreemption,
// isPreemptionAllowed) as in the kubelet's admission of a critical pod (pkg/kubelet/types
// Preemptable), and so does Slicer's own preemption (docs/design/preemption.md): no pod of a
// tenant can preempt Slicer's, even one that names this class (docs/design/threat-model.md,
// "Priority"). kubeadm runs the control plane's static pods at this class too
// (cmd/kubeadm/app/util/staticpod/utils.go).
const PriorityClass = "system-node-critical"

// CriticalPriorityClasses are the system priority classes, above every class a user can
// create: the ones the guard of docs/install.md ("Critical priority classes") keeps tenants
// from.
var CriticalPriorityClasses = []string{"system-node-critical", "system-cluster-critical"}

// CriticalPriorityQuotaName names the ResourceQuota CriticalPriorityQuotas renders.
const CriticalPriorityQuotaName = "slicer-critical-priority"

// criticalPriorityPods is the quota's hard limit: far above what Slicer runs (a few
// control-plane replicas, one agent per GPU node), since the quota is there to admit pods at
// the critical classes in Slicer's namespaces, not to count them.
const criticalPriorityPods = "100000"

// CriticalPriorityQuotas renders, when spec.priority.criticalPriorityQuota is Enabled, the
// ResourceQuota that admits pods at the critical priority classes in the agent's namespace,
// which the operator owns. Where the kube-apiserver's ResourceQuota admission plugin lists
// those classes under limitedResources, a pod at them is admitted only in a namespace holding
// a quota that covers them (k8s.io/apiserver pkg/admission/plugin/resourcequota
// controller.go, limitedByDefault): the agent's, the operator's, kube-system's, and no
// tenant's. The operator's own namespace is the install's: its quota must exist before the
// operator's pod (config/components/critical-priority, the Helm chart, or the admin under
// OLM; docs/install.md), and an operator-owned copy would go with the Slicer, leaving the
// operator unable to start again.
func CriticalPriorityQuotas(o Options) []client.Object {
	if o.Slicer.Spec.Priority.CriticalPriorityQuota != slicerv1alpha1.FeatureEnabled || o.AgentNamespace == o.Namespace {
		return nil
	}
	return []client.Object{AgentNamespace(o), CriticalPriorityQuota(o.AgentNamespace)}
}

// CriticalPriorityQuota is the quota of one namespace (config/components/critical-priority
// ships the operator namespace's, which must exist before the operator's own pod does).
func CriticalPriorityQuota(namespace string) *corev1.ResourceQuota {
	return &corev1.ResourceQuota{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion.WithKind("ResourceQuota")),
		ObjectMeta: metav1.ObjectMeta{Name: CriticalPriorityQuotaName, Namespace: namespace, Labels: commonLabels()},
		Spec: corev1.ResourceQuotaSpec{
			Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(criticalPriorityPods)},
			ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
				ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn,
				Values: append([]string(nil), CriticalPriorityClasses...),
			}}},
		},
	}
}

// AvoidGPUNodesTerm is the node selector term that keeps a pod off the GPU nodes Slicer
// manages: the nodes the agent runs on carry slicer.dev/mig-capable=true (AgentNodeAffinity);
// NotIn also matches nodes without the label.
func AvoidGPUNodesTerm() corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
		Key: slicerv1alpha1.LabelMIGCapable, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"true"},
	}}}
}

// controlPlaneAffinity is the affinity of the scheduler's and the webhook's pods: replicas
// spread over nodes, and off the GPU nodes as spec.controlPlane.avoidGPUNodes says
// (preferred unless Required). A compromised GPU node holds the tokens of the pods it runs;
// docs/design/threat-model.md says what holds when the control plane shares one anyway.
func controlPlaneAffinity(o Options, component string) *corev1.Affinity {
	a := preferSpread(component)
	term := AvoidGPUNodesTerm()
	if o.Slicer.Spec.ControlPlane.AvoidGPUNodes == slicerv1alpha1.AvoidGPUNodesRequired {
		a.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{term},
		}}
		return a
	}
	a.NodeAffinity = &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 100, Preference: term,
	}}}
	return a
}

// placeControlPlane sets the priority class, the affinity, the node selector and the
// tolerations of a scheduler or webhook pod.
func placeControlPlane(o Options, component string, pod *corev1.PodSpec) {
	cp := o.Slicer.Spec.ControlPlane
	pod.PriorityClassName = PriorityClass
	pod.Affinity = controlPlaneAffinity(o, component)
	if len(cp.NodeSelector) > 0 {
		pod.NodeSelector = make(map[string]string, len(cp.NodeSelector))
		for k, v := range cp.NodeSelector {
			pod.NodeSelector[k] = v
		}
	}
	if len(cp.Tolerations) > 0 {
		pod.Tolerations = append([]corev1.Toleration(nil), cp.Tolerations...)
	}
}
