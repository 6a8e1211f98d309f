package render

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/internal/kubeversion"
)

// Rules of the components' roles. The operator holds every one of them
// itself (operator/controller's RBAC markers), because Kubernetes lets a
// role be granted only by someone who has it (no escalate, no bind).
var (
	metricsAuthRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	readWatch = []string{"get", "list", "watch"}

	// schedulerBaseRules are the rules every scheduler build gets: the part
	// of kube-scheduler's system:kube-scheduler and system:volume-scheduler
	// roles that is the same in 1.35 to 1.37, plus Slicer's API. The DRA
	// rules differ per minor (schedulerMinors).
	schedulerBaseRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"bindings", "pods/binding"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch", "update"}},
		// Defragmentation in Evict mode moves pods through the Eviction API (PDBs enforced).
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"nodes", "namespaces", "services", "replicationcontrollers", "persistentvolumeclaims", "persistentvolumes", "configmaps"}, Verbs: readWatch},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "statefulsets"}, Verbs: readWatch},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: readWatch},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments"}, Verbs: readWatch},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: readWatch},
		{APIGroups: []string{"slicer.dev"}, Resources: []string{"nodeaccelerators"}, Verbs: readWatch},
		{APIGroups: []string{"slicer.dev"}, Resources: []string{"sliceallocations"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
	}

	// SchedulerLeaseRules are namespaced to the operator namespace.
	SchedulerLeaseRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "update"}},
	}

	// AgentRules let the agent report its node and realize its allocations. Every write is
	// confined to the agent's own node by AgentNodeGuard.
	AgentRules = append([]rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: readWatch},
		// The RuntimeClasses, to report one that selects the node's NVIDIA runtime
		// (device-plugin/engine.RuntimeBypass).
		{APIGroups: []string{"node.k8s.io"}, Resources: []string{"runtimeclasses"}, Verbs: readWatch},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		// Its node's NodeAccelerator: created once, then only its status is written
		// (device-plugin/engine/publish.go).
		{APIGroups: []string{"slicer.dev"}, Resources: []string{"nodeaccelerators"}, Verbs: []string{"get", "list", "watch", "create"}},
		{APIGroups: []string{"slicer.dev"}, Resources: []string{"nodeaccelerators/status"}, Verbs: []string{"patch"}},
		// The finalizer of the allocations it realizes, their status; delete those whose pod
		// is gone (device-plugin/agent/write.go: patches and deletes only).
		{APIGroups: []string{"slicer.dev"}, Resources: []string{"sliceallocations"}, Verbs: []string{"get", "list", "watch", "patch", "delete"}},
		{APIGroups: []string{"slicer.dev"}, Resources: []string{"sliceallocations/status"}, Verbs: []string{"patch"}},
	}, metricsAuthRules...)

	// WebhookRules only serve authenticated metrics: the webhook reads
	// nothing from the API.
	WebhookRules = metricsAuthRules

	// SCCRules let a ServiceAccount use OpenShift's privileged SCC.
	SCCRules = []rbacv1.PolicyRule{{
		APIGroups: []string{"security.openshift.io"}, Resources: []string{"securitycontextconstraints"},
		ResourceNames: []string{"privileged"}, Verbs: []string{"use"},
	}}
)

// SchedulerRules are the scheduler's ClusterRole rules for the build of
// minor m: the common rules, that minor's DRA rules, then the metrics
// authentication rules. Nil for a minor without a build.
func SchedulerRules(m kubeversion.Minor) []rbacv1.PolicyRule {
	b, ok := schedulerMinors[m]
	if !ok {
		return nil
	}
	rules := append([]rbacv1.PolicyRule{}, schedulerBaseRules...)
	rules = append(rules, b.draRules...)
	return append(rules, metricsAuthRules...)
}

// RBAC renders one ClusterRole and ClusterRoleBinding per component
// ServiceAccount, the scheduler's lease Role and, on OpenShift, the agent's
// SCC Role. The scheduler's objects follow the apiserver's minor and are
// left out when it has no scheduler build (Removed lists them then).
func RBAC(o Options) []client.Object {
	var objs []client.Object
	if UsesDRA(o) {
		// No scheduler and no webhook (DevicePluginFrontend lists theirs for removal).
		objs = append(objs,
			clusterRole(AgentName, ComponentAgent, append(append([]rbacv1.PolicyRule{}, AgentRules...), AgentDRARules...)),
			clusterRoleBinding(AgentName, ComponentAgent, o.AgentNamespace))
		if o.Platform.OpenShift {
			objs = append(objs,
				role(o.AgentNamespace, AgentName, ComponentAgent, SCCRules),
				roleBinding(o.AgentNamespace, AgentName, ComponentAgent, o.AgentNamespace))
		}
		objs = append(objs, AgentMetricsCertRBAC(o)...)
		return append(objs, Guards(o)...)
	}
	if SchedulerSupported(o) {
		objs = append(objs,
			clusterRole(SchedulerName, ComponentScheduler, SchedulerRules(o.Kubernetes.Minor)),
			clusterRoleBinding(SchedulerName, ComponentScheduler, o.Namespace),
			role(o.Namespace, SchedulerName, ComponentScheduler, SchedulerLeaseRules),
			roleBinding(o.Namespace, SchedulerName, ComponentScheduler, o.Namespace))
	}
	objs = append(objs,
		clusterRole(WebhookName, ComponentWebhook, WebhookRules),
		clusterRoleBinding(WebhookName, ComponentWebhook, o.Namespace),
		clusterRole(AgentName, ComponentAgent, AgentRules),
		clusterRoleBinding(AgentName, ComponentAgent, o.AgentNamespace))
	if o.Platform.OpenShift {
		objs = append(objs,
			role(o.AgentNamespace, AgentName, ComponentAgent, SCCRules),
			roleBinding(o.AgentNamespace, AgentName, ComponentAgent, o.AgentNamespace))
	}
	objs = append(objs, AgentMetricsCertRBAC(o)...)
	return append(objs, Guards(o)...)
}

func clusterRole(name, component string, rules []rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   typeMeta(rbacv1.SchemeGroupVersion.WithKind("ClusterRole")),
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels(component)},
		Rules:      rules,
	}
}

func clusterRoleBinding(name, component, saNamespace string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   typeMeta(rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding")),
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels(component)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: saNamespace}},
	}
}

func role(namespace, name, component string, rules []rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   typeMeta(rbacv1.SchemeGroupVersion.WithKind("Role")),
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels(component)},
		Rules:      rules,
	}
}

func roleBinding(namespace, name, component, saNamespace string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   typeMeta(rbacv1.SchemeGroupVersion.WithKind("RoleBinding")),
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels(component)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: saNamespace}},
	}
}
