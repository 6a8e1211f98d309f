package render

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/internal/kubeversion"
	webhookconfig "github.com/slicer-operator/slicer/webhook/config"
)

// schedulerMinor is everything that differs between the scheduler builds of
// the supported Kubernetes minors, besides the image. One entry per
// kubeversion.Supported minor (TestSchedulerMinorsCoverSupported).
type schedulerMinor struct {
	// configAPIVersion is the KubeSchedulerConfiguration API the minor's
	// kube-scheduler reads. kubescheduler.config.k8s.io/v1 is served by
	// 1.35, 1.36 and 1.37 alike (k8s.io/kube-scheduler config/v1), and the
	// plugin arguments Slicer sets (NodeResourcesFitArgs) have the same
	// fields in the three (config/v1/types_pluginargs.go is unchanged).
	configAPIVersion string
	// newerPluginSets are the profile extension points that the main
	// module's config/v1 types (1.37) always write, even empty, and that
	// this minor's kube-scheduler does not know. It decodes its
	// configuration strictly (cmd/kube-scheduler/app/options/configfile.go,
	// pkg/scheduler/apis/config/scheme), so an unknown field stops it.
	newerPluginSets []string
	// draRules are the resource.k8s.io rules of that minor's own
	// system:kube-scheduler ClusterRole with its default feature gates
	// (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go and
	// pkg/features/kube_features.go of k8s.io/kubernetes v1.35.4, v1.36.3,
	// v1.37.2). Never more than that role grants.
	draRules []rbacv1.PolicyRule
}

var (
	readUpdate = []string{"get", "list", "watch", "update", "patch"}

	// draRules135: DynamicResourceAllocation (GA, locked on); the other DRA
	// gates that add scheduler rules are off by default in 1.35.
	draRules135 = []rbacv1.PolicyRule{
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"deviceclasses", "resourceslices"}, Verbs: readWatch},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaims/status"}, Verbs: readUpdate},
		{APIGroups: []string{""}, Resources: []string{"pods/finalizers"}, Verbs: []string{"update"}},
	}
	// draRules136 adds DRAExtendedResource (beta, on by default since 1.36:
	// the scheduler creates and deletes the claims of extended resources
	// backed by DRA) and DRAResourceClaimGranularStatusAuthorization (beta,
	// on since 1.36: binding results go through resourceclaims/binding).
	// DRADeviceTaintRules is beta but off in 1.36.
	draRules136 = append(append([]rbacv1.PolicyRule{}, draRules135...),
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"create", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/binding"}, Verbs: []string{"update", "patch"}},
	)
	// draRules137 adds DRADeviceTaintRules (GA, on by default in 1.37).
	draRules137 = append(append([]rbacv1.PolicyRule{}, draRules136...),
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"devicetaintrules"}, Verbs: readWatch},
	)

	schedulerMinors = map[kubeversion.Minor]schedulerMinor{
		{Major: 1, Minor: 35}: {
			configAPIVersion: "kubescheduler.config.k8s.io/v1",
			newerPluginSets:  []string{"placementGenerate", "placementScore", "podGroupPostFilter"},
			draRules:         draRules135,
		},
		{Major: 1, Minor: 36}: {
			configAPIVersion: "kubescheduler.config.k8s.io/v1",
			newerPluginSets:  []string{"podGroupPostFilter"},
			draRules:         draRules136,
		},
		{Major: 1, Minor: 37}: {
			configAPIVersion: "kubescheduler.config.k8s.io/v1",
			draRules:         draRules137,
		},
	}
)

// SchedulerSupported reports whether a scheduler build exists for the
// apiserver's minor. When it does not, no scheduler object is rendered and
// the admission configuration rejects MIG pods (see WebhookAdmission).
func SchedulerSupported(o Options) bool {
	_, ok := schedulerMinors[o.Kubernetes.Minor]
	return ok && kubeversion.IsSupported(o.Kubernetes.Minor)
}

// UnsupportedMessage explains, for conditions and admission rejections, why
// no scheduler runs.
func UnsupportedMessage(o Options) string {
	return fmt.Sprintf("the apiserver reports Kubernetes %s (minor %s), outside the range Slicer supports (%s), so Slicer runs no scheduler",
		o.Kubernetes.GitVersion, o.Kubernetes.Minor, kubeversion.SupportedRange())
}

// schedulerBuild returns the per-minor facts and the image for the
// apiserver's minor.
func schedulerBuild(o Options) (schedulerMinor, string, error) {
	m := o.Kubernetes.Minor
	b, ok := schedulerMinors[m]
	if !ok || !kubeversion.IsSupported(m) {
		return schedulerMinor{}, "", fmt.Errorf("no scheduler build: %s", UnsupportedMessage(o))
	}
	img := o.Images.Schedulers[m]
	if img == "" {
		return schedulerMinor{}, "", fmt.Errorf("no scheduler image for Kubernetes %s (%s is empty)", m, SchedulerImageEnv(m))
	}
	return b, img, nil
}

// SchedulerImage is the scheduler build for the apiserver's minor.
func SchedulerImage(o Options) (string, error) {
	_, img, err := schedulerBuild(o)
	return img, err
}

// forMinor adapts the rendered configuration to what the minor's
// kube-scheduler decodes: the API version must be the one it reads, and
// extension points it does not know are dropped. Dropping is lossless only
// for an empty set, so a set with plugins in it is an error, not a silent
// loss.
func (b schedulerMinor) forMinor(raw []byte, m kubeversion.Minor) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("read scheduler configuration: %w", err)
	}
	if got := cfg["apiVersion"]; got != b.configAPIVersion {
		return nil, fmt.Errorf("scheduler configuration is %v, Kubernetes %s reads %s", got, m, b.configAPIVersion)
	}
	if len(b.newerPluginSets) == 0 {
		return raw, nil
	}
	profiles, _ := cfg["profiles"].([]any)
	for _, p := range profiles {
		profile, _ := p.(map[string]any)
		plugins, _ := profile["plugins"].(map[string]any)
		for _, key := range b.newerPluginSets {
			set, found := plugins[key]
			if !found {
				continue
			}
			if s, _ := set.(map[string]any); len(s) > 0 {
				return nil, fmt.Errorf("scheduler configuration sets plugins at %s, which kube-scheduler %s does not know", key, m)
			}
			delete(plugins, key)
		}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("write scheduler configuration: %w", err)
	}
	return out, nil
}

// Removed lists the objects that must not exist under o: with no scheduler
// build for the apiserver's minor, every scheduler object and the
// MutatingWebhookConfiguration that would send pods to it. The controller
// deletes them (after the rejecting admission policy is in place).
func Removed(o Options) []client.Object {
	if SchedulerSupported(o) {
		return nil
	}
	return schedulerObjects(o)
}

// schedulerObjects names the scheduler's objects and the webhook registration that steers
// pods to it (kinds and names only).
func schedulerObjects(o Options) []client.Object {
	meta := func(namespace, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace}
	}
	ns := o.Namespace
	return []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			TypeMeta:   typeMeta(admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration")),
			ObjectMeta: meta("", webhookconfig.ObjectName(webhookconfig.Options{NamePrefix: admissionNamePrefix})),
		},
		&appsv1.Deployment{TypeMeta: typeMeta(appsv1.SchemeGroupVersion.WithKind("Deployment")), ObjectMeta: meta(ns, SchedulerName)},
		&policyv1.PodDisruptionBudget{TypeMeta: typeMeta(policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget")), ObjectMeta: meta(ns, SchedulerName)},
		&corev1.ConfigMap{TypeMeta: typeMeta(corev1.SchemeGroupVersion.WithKind("ConfigMap")), ObjectMeta: meta(ns, SchedulerConfigMap)},
		&corev1.ServiceAccount{TypeMeta: typeMeta(corev1.SchemeGroupVersion.WithKind("ServiceAccount")), ObjectMeta: meta(ns, SchedulerName)},
		&rbacv1.RoleBinding{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.WithKind("RoleBinding")), ObjectMeta: meta(ns, SchedulerName)},
		&rbacv1.Role{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.WithKind("Role")), ObjectMeta: meta(ns, SchedulerName)},
		&rbacv1.ClusterRoleBinding{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding")), ObjectMeta: meta("", SchedulerName)},
		&rbacv1.ClusterRole{TypeMeta: typeMeta(rbacv1.SchemeGroupVersion.WithKind("ClusterRole")), ObjectMeta: meta("", SchedulerName)},
	}
}
