package render

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// ComponentDRA labels the DeviceClasses of the DRA frontend.
const ComponentDRA = "dra"

// AgentFrontendDRAArg is the agent's flag that runs its kubelet DRA plugin instead of the
// device plugin.
const AgentFrontendDRAArg = "--frontend=dra"

// AgentDRARules are what the agent's kubelet DRA plugin needs on top of AgentRules: publish
// its node's ResourceSlices (k8s.io/dynamic-resource-allocation resourceslice's controller
// lists, watches, creates, updates and deletes them one by one; AgentNodeGuard confines it to
// its node's) and read the claims it prepares.
var AgentDRARules = []rbacv1.PolicyRule{
	{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: readWatch},
}

// UsesDRA reports whether the Slicer selects the DRA frontend.
func UsesDRA(o Options) bool {
	return o.Slicer != nil && o.Slicer.Spec.Frontend == slicerv1alpha1.FrontendDRA
}

// AgentPodLabels select the agent's pods (its DaemonSet's selector).
func AgentPodLabels() map[string]string { return selectorLabels(ComponentAgent) }

// RunsDRAPlugin reports whether an agent pod runs (or, while it terminates, may still run)
// the kubelet DRA plugin, which publishes ResourceSlices of driver migdra.DriverName.
func RunsDRAPlugin(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if slices.Contains(c.Args, AgentFrontendDRAArg) {
			return true
		}
	}
	return false
}

// ProfilesOfModels lists the MIG profiles of the named GPU models (the cluster's models: the
// slicer.dev/gpu-model node labels and the NodeAccelerators' GPUs), deduplicated and sorted;
// names that are not a model Slicer knows are returned in unknown.
func ProfilesOfModels(models []string) (profiles, unknown []string) {
	seen := map[string]bool{}
	for _, name := range models {
		m, err := mig.ParseModel(name)
		if err != nil {
			unknown = append(unknown, name)
			continue
		}
		for _, p := range m.Profiles() {
			if !seen[p.Name] {
				seen[p.Name] = true
				profiles = append(profiles, p.Name)
			}
		}
	}
	return mig.SortSlices(profiles), unknown
}

// DeviceClasses renders one DeviceClass per profile (internal/mig/migdra), each naming the
// profile's nvidia.com/mig-<profile> extended resource so the stock scheduler serves pods
// that ask for it with no claim, then the class of whole GPUs, naming nvidia.com/gpu
// (migdra.WholeDeviceClass): every node's pool may hold whole GPUs (a GPU with MIG mode off,
// or one its policy lets the agent switch).
func DeviceClasses(profiles []string) ([]client.Object, error) {
	classes, err := migdra.DeviceClasses(profiles, true)
	if err != nil {
		return nil, err
	}
	classes = append(classes, migdra.WholeDeviceClass(true))
	out := make([]client.Object, 0, len(classes))
	for i := range classes {
		c := &classes[i]
		c.Labels = labels(ComponentDRA)
		out = append(out, c)
	}
	return out, nil
}

// AllDeviceClasses are the classes of every profile Slicer knows and of whole GPUs: what cleanup and a switch
// back to the device-plugin frontend delete.
func AllDeviceClasses() []client.Object {
	objs, err := DeviceClasses(mig.KnownProfileNames())
	if err != nil {
		panic("render: a known profile has no DeviceClass: " + err.Error()) // a table bug, caught by tests
	}
	return objs
}

// DevicePluginFrontend lists the objects only the device-plugin frontend uses: the scheduler
// and the webhook with their configuration, RBAC, serving and metrics certificates and
// admission registrations.
// The DRA frontend deletes them (only names and kinds matter).
func DevicePluginFrontend(o Options, adm AdmissionRenderer) []client.Object {
	objs := schedulerObjects(o)
	meta := func(namespace, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace}
	}
	if web, err := Webhook(o); err == nil {
		objs = append(objs, web...)
	}
	if adm != nil {
		if a, err := WebhookAdmission(o, adm); err == nil {
			objs = append(objs, a...)
		}
	}
	objs = append(objs,
		&corev1.Secret{TypeMeta: typeMeta(corev1.SchemeGroupVersion.WithKind("Secret")), ObjectMeta: meta(o.Namespace, WebhookCertSecret)},
		&corev1.Service{TypeMeta: typeMeta(corev1.SchemeGroupVersion.WithKind("Service")), ObjectMeta: meta(o.Namespace, SchedulerName+"-metrics")},
		&corev1.Service{TypeMeta: typeMeta(corev1.SchemeGroupVersion.WithKind("Service")), ObjectMeta: meta(o.Namespace, WebhookName+"-metrics")},
		&rbacv1.ClusterRoleBinding{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding")), ObjectMeta: meta("", WebhookName)},
		&rbacv1.ClusterRole{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.WithKind("ClusterRole")), ObjectMeta: meta("", WebhookName)},
	)
	for _, v := range devicePluginFrontendMetricsTLS(o) {
		objs = append(objs,
			&corev1.Secret{TypeMeta: typeMeta(corev1.SchemeGroupVersion.WithKind("Secret")), ObjectMeta: meta(v.SecretNamespace, v.Secret)},
			&corev1.ConfigMap{TypeMeta: typeMeta(corev1.SchemeGroupVersion.WithKind("ConfigMap")), ObjectMeta: meta(v.Namespace, v.CAConfigMap)})
	}
	return objs
}
