// Package manager builds the controller-runtime manager options of the
// operator, shared by the binary and the integration tests so both cache
// and watch the same way.
package manager

import (
	"time"

	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/operator/render"
)

// LeaderElectionID is the name of the operator's Lease, in its namespace.
const LeaderElectionID = "slicer-operator.slicer.dev"

// Leader-election timings, controller-runtime's defaults: a standby takes
// over at most about LeaseDuration after the leader died without releasing
// the Lease (a graceful stop releases it: LeaderElectionReleaseOnCancel).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Config are the knobs of the manager.
type Config struct {
	Namespace        string
	AgentNamespace   string
	LeaderElection   bool
	LeaderElectionID string
	// LeaseDuration, RenewDeadline and RetryPeriod time the leader election;
	// the Default* constants when zero.
	LeaseDuration   time.Duration
	RenewDeadline   time.Duration
	RetryPeriod     time.Duration
	Metrics         metricsserver.Options
	HealthProbeAddr string
	// SyncPeriod re-reconciles everything periodically (drift of kinds that
	// are not watched, e.g. the NodeFeatureRule); 10h when zero.
	SyncPeriod time.Duration
}

// Scheme has every kind the operator reads or writes as a typed object.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(slicerv1alpha1.AddToScheme(s))
	utilruntime.Must(kmmv1beta1.AddToScheme(s))
	utilruntime.Must(nfdv1alpha1.AddToScheme(s))
	return s
}

// Options returns the manager options. The cache holds only objects labelled
// as managed by the operator (plus Slicer's own kinds and CRDs), and Secrets
// only in the operator namespace, so RBAC for Secrets stays namespaced.
func Options(c Config) ctrl.Options {
	managed := labels.SelectorFromSet(labels.Set{render.ManagedByLabel: render.ManagedByValue})
	byManaged := cache.ByObject{Label: managed}
	gpuModel, err := labels.NewRequirement(slicerv1alpha1.LabelGPUModel, selection.Exists, nil)
	if err != nil {
		panic("manager: " + err.Error()) // a constant label key
	}
	gpuNodes := labels.NewSelector().Add(*gpuModel)
	agentPods := cache.ByObject{Label: managed}
	if c.AgentNamespace != "" {
		agentPods.Namespaces = map[string]cache.Config{c.AgentNamespace: {}}
	}
	var sync *time.Duration
	if c.SyncPeriod > 0 {
		sync = &c.SyncPeriod
	}
	return ctrl.Options{
		Scheme:                        Scheme(),
		Metrics:                       c.Metrics,
		HealthProbeBindAddress:        c.HealthProbeAddr,
		LeaderElection:                c.LeaderElection,
		LeaderElectionID:              c.LeaderElectionID,
		LeaderElectionNamespace:       c.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 durationOr(c.LeaseDuration, DefaultLeaseDuration),
		RenewDeadline:                 durationOr(c.RenewDeadline, DefaultRenewDeadline),
		RetryPeriod:                   durationOr(c.RetryPeriod, DefaultRetryPeriod),
		Cache: cache.Options{
			SyncPeriod: sync,
			ByObject: map[client.Object]cache.ByObject{
				&appsv1.Deployment{}:            byManaged,
				&appsv1.DaemonSet{}:             byManaged,
				&corev1.ConfigMap{}:             byManaged,
				&corev1.Service{}:               byManaged,
				&corev1.ServiceAccount{}:        byManaged,
				&corev1.Namespace{}:             byManaged,
				&policyv1.PodDisruptionBudget{}: byManaged,
				&corev1.ResourceQuota{}:         byManaged,
				&rbacv1.ClusterRole{}:           byManaged,
				&rbacv1.ClusterRoleBinding{}:    byManaged,
				&rbacv1.Role{}:                  byManaged,
				&rbacv1.RoleBinding{}:           byManaged,
				&admissionregistrationv1.MutatingWebhookConfiguration{}:     byManaged,
				&admissionregistrationv1.ValidatingAdmissionPolicy{}:        byManaged,
				&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}: byManaged,
				&resourceapi.DeviceClass{}:                                  byManaged,
				// Read only where served (render.Platform.DeviceTaintRules).
				&resourceapi.DeviceTaintRule{}: byManaged,
				// Only the nodes the NFD rule labels with a GPU model (DRA DeviceClasses).
				&corev1.Node{}: {Label: gpuNodes},
				&corev1.Secret{}: {
					Label:      managed,
					Namespaces: map[string]cache.Config{c.Namespace: {}},
				},
				// The agent's pods (whether a DRA agent still runs) and only Slicer's
				// driver's ResourceSlices (deleted once none does).
				&corev1.Pod{}:                agentPods,
				&resourceapi.ResourceSlice{}: {Field: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, migdra.DriverName)},
			},
		},
	}
}

// durationOr is a pointer to d, or to def when d is zero.
func durationOr(d, def time.Duration) *time.Duration {
	if d == 0 {
		d = def
	}
	return &d
}
