// Package controller reconciles the cluster-scoped Slicer named "default":
// observe the cluster, render the desired objects (operator/render), apply
// them with server-side apply under one field manager, then compute the
// status from what the cluster reports. Conditions are outputs only.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/certs"
	"github.com/slicer-operator/slicer/operator/metrics"
	"github.com/slicer-operator/slicer/operator/render"
)

// Finalizer removes the cluster-scoped objects when the Slicer is deleted.
const Finalizer = "slicer.dev/cleanup"

// Defaults of the reconciler's timing knobs.
const (
	DefaultDependencyRecheck = 30 * time.Second
	DefaultDeletionTimeout   = 2 * time.Minute
	DefaultCertValidity      = 365 * 24 * time.Hour
	maxRequeue               = 12 * time.Hour
)

// SlicerReconciler installs Slicer from the Slicer CR.
type SlicerReconciler struct {
	Client    client.Client
	Discovery discovery.DiscoveryInterface
	Recorder  events.EventRecorder
	Metrics   *metrics.Metrics

	// Namespace of the operator, scheduler and webhook; AgentNamespace of the agent.
	Namespace      string
	AgentNamespace string
	Images         render.Images
	Ports          render.Ports
	// HostNetworkAddress is how the apiserver reaches a host-network webhook.
	HostNetworkAddress string
	// APIServer is passed to host-network components as their apiserver
	// address (see render.Options.APIServer).
	APIServer render.APIServerEndpoint
	// Admission renders the admission configurations (webhook/config).
	Admission render.AdmissionRenderer
	// PrometheusRule and Dashboards are the monitoring assets.
	PrometheusRule []byte
	Dashboards     map[string][]byte

	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// DependencyRecheck is how often missing optional APIs are looked for again.
	DependencyRecheck time.Duration
	// DeletionTimeout bounds how long deletion waits for cluster-scoped objects.
	DeletionTimeout time.Duration
	// CertValidity of self-managed webhook certificates.
	CertValidity time.Duration
}

// Operator RBAC. The operator also holds every permission it grants to the
// scheduler, webhook and agent (render/rbac.go), since Kubernetes forbids
// granting what one does not have; no wildcards, no CRD writes.
//
// +kubebuilder:rbac:groups=slicer.dev,resources=slicers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=slicer.dev,resources=slicers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=slicer.dev,resources=slicers/finalizers,verbs=update
// +kubebuilder:rbac:groups=slicer.dev,resources=nodeaccelerators,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=slicer.dev,resources=nodeaccelerators/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=slicer.dev,resources=sliceallocations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=slicer.dev,resources=sliceallocations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts;services;configmaps;namespaces,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=slicer-system,resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch;update
// +kubebuilder:rbac:groups="",resources=bindings;pods/binding,verbs=create
// +kubebuilder:rbac:groups="",resources=nodes;replicationcontrollers;persistentvolumeclaims;persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;daemonsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=replicasets;statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings;roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=nfd.k8s-sigs.io,resources=nodefeaturerules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kmm.sigs.x-k8s.io,resources=modules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors;prometheusrules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cert-manager.io,resources=issuers;certificates,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses;csinodes;csidrivers;csistoragecapacities;volumeattachments,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims;resourceslices;deviceclasses;devicetaintrules,verbs=get;list;watch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=security.openshift.io,resources=securitycontextconstraints,resourceNames=privileged,verbs=use

// SetupWithManager registers the controller. Every managed kind it can
// watch triggers a reconcile of the Slicer (drift is reverted at once), and
// so do NodeAccelerators (status summary) and CRDs (optional APIs
// installed at run time).
func (r *SlicerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	toSlicer := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: slicerv1alpha1.SlicerName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("slicer").
		For(&slicerv1alpha1.Slicer{}).
		Owns(&appsv1.Deployment{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&corev1.Secret{}).
		Owns(&corev1.Namespace{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&rbacv1.ClusterRole{}).
		Owns(&rbacv1.ClusterRoleBinding{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&admissionregistrationv1.MutatingWebhookConfiguration{}).
		Owns(&admissionregistrationv1.ValidatingAdmissionPolicy{}).
		Owns(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}).
		Watches(&slicerv1alpha1.NodeAccelerator{}, toSlicer).
		Watches(&apiextensionsv1.CustomResourceDefinition{}, toSlicer, builder.WithPredicates(predicate.NewPredicateFuncs(isOptionalCRD))).
		Complete(r)
}

func isOptionalCRD(o client.Object) bool {
	crd, ok := o.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return false
	}
	switch crd.Spec.Group {
	case "nfd.k8s-sigs.io", "kmm.sigs.x-k8s.io", "monitoring.coreos.com", "cert-manager.io":
		return true
	}
	return false
}

func (r *SlicerReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Reconcile implements reconcile.Reconciler.
func (r *SlicerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	if req.Name != slicerv1alpha1.SlicerName {
		return ctrl.Result{}, nil
	}
	s := &slicerv1alpha1.Slicer{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	platform, err := detectPlatform(r.Discovery)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.recordPlatform(platform)
	opts := r.options(s, platform)
	if !s.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s, opts)
	}
	if !controllerutil.ContainsFinalizer(s, Finalizer) {
		controllerutil.AddFinalizer(s, Finalizer)
		if err := r.Client.Update(ctx, s); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
		return ctrl.Result{}, nil
	}

	st := newStatus(s)
	res := &result{}
	ap := applier{c: r.Client, owner: s}
	writes := 0
	apply := func(component string, objs []client.Object) bool {
		n, err := ap.applyAll(ctx, objs)
		writes += n
		if err != nil {
			res.fail(fmt.Errorf("%s: %w", component, err))
			return false
		}
		return true
	}

	// RBAC first: every component's ServiceAccount needs it.
	apply("rbac", render.RBAC(opts))
	r.reconcileNFD(ctx, opts, st, apply)
	driverOK := r.reconcileDriver(ctx, opts, st, res, apply)
	webhookOK := r.reconcileWebhook(ctx, s, &opts, st, res, apply)
	// Order: webhook and VAP before the scheduler before the agent, so no
	// MIG pod reaches the default scheduler and no capacity is advertised
	// before pods can be steered to Slicer's scheduler.
	schedulerOK := false
	if webhookOK {
		schedulerOK = r.reconcileScheduler(ctx, opts, st, apply)
	} else {
		st.set(slicerv1alpha1.ConditionSchedulerAvailable, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, "waiting for the webhook to be available")
	}
	switch {
	case !schedulerOK:
		st.set(slicerv1alpha1.ConditionAgentAvailable, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, "waiting for the scheduler to be available")
	case !driverOK:
		st.set(slicerv1alpha1.ConditionAgentAvailable, metav1.ConditionFalse, slicerv1alpha1.ReasonDependencyMissing, "waiting for the driver: "+st.message(slicerv1alpha1.ConditionDriverReady))
	default:
		r.reconcileAgent(ctx, opts, st, res, apply)
	}
	// The agent's metrics objects live in its namespace: only once it exists.
	r.reconcileMonitoring(opts, st, res, apply, schedulerOK && driverOK)
	if err := r.summarize(ctx, st); err != nil {
		res.fail(err)
	}
	if !platform.NFD || (opts.Slicer.Spec.Driver.Mode == slicerv1alpha1.DriverModeKMM && !platform.KMM) {
		res.requeueAfter(orDefault(r.DependencyRecheck, DefaultDependencyRecheck))
	}
	st.summarizeConditions(res.err())
	if writes > 0 {
		log.Info("applied objects", "writes", writes)
	}
	if err := r.updateStatus(ctx, s, st); err != nil {
		res.fail(err)
	}
	return res.outcome()
}

// options gathers the renderers' inputs.
func (r *SlicerReconciler) options(s *slicerv1alpha1.Slicer, p render.Platform) render.Options {
	cert, _ := resolveCertProvider(s.Spec.Webhook.CertificateProvider, p)
	return render.Options{
		Slicer:             s,
		Namespace:          r.Namespace,
		AgentNamespace:     r.AgentNamespace,
		Images:             r.Images,
		Ports:              r.Ports,
		Platform:           p,
		Cert:               cert,
		HostNetworkAddress: r.HostNetworkAddress,
		APIServer:          r.APIServer,
		PrometheusRule:     r.PrometheusRule,
		Dashboards:         r.Dashboards,
	}
}

func (r *SlicerReconciler) recordPlatform(p render.Platform) {
	r.Metrics.SetDependency(metrics.DependencyNFD, p.NFD)
	r.Metrics.SetDependency(metrics.DependencyKMM, p.KMM)
	r.Metrics.SetDependency(metrics.DependencyPrometheusOperator, p.Monitoring)
	r.Metrics.SetDependency(metrics.DependencyCertManager, p.CertManager)
}

type applyFunc func(component string, objs []client.Object) bool

func (r *SlicerReconciler) reconcileNFD(_ context.Context, o render.Options, st *status, apply applyFunc) {
	const cond = slicerv1alpha1.ConditionNodeFeatureRuleReady
	if !o.Platform.NFD {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonDependencyMissing, "Node Feature Discovery is not installed ("+nfdGroupVersion+" not served); no node gets "+slicerv1alpha1.LabelMIGCapable)
		return
	}
	rule, err := render.NodeFeatureRule(o)
	if err != nil {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return
	}
	if apply("nodefeaturerule", []client.Object{rule}) {
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonApplied, "NodeFeatureRule "+rule.Name+" applied")
	} else {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "NodeFeatureRule could not be applied")
	}
}

// reconcileDriver applies the KMM Module (KMM mode) and reports whether the
// agent may be rolled out.
func (r *SlicerReconciler) reconcileDriver(ctx context.Context, o render.Options, st *status, res *result, apply applyFunc) bool {
	const cond = slicerv1alpha1.ConditionDriverReady
	switch o.Slicer.Spec.Driver.Mode {
	case slicerv1alpha1.DriverModePreinstalled:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonDriverPreinstalled, "the driver is provided by the host")
		r.Metrics.SetDependency(metrics.DependencyDriver, true)
		return true
	case slicerv1alpha1.DriverModeEmulated:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonEmulated, "no driver: agents emulate their GPUs")
		r.Metrics.SetDependency(metrics.DependencyDriver, true)
		return true
	}
	if !o.Platform.KMM {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonDependencyMissing, "Kernel Module Management is not installed ("+kmmGroupVersion+" not served)")
		r.Metrics.SetDependency(metrics.DependencyDriver, false)
		return false
	}
	objs, err := render.Driver(o)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return false
	}
	if !apply("driver", objs) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "KMM Module could not be applied")
		return false
	}
	m := &unstructured.Unstructured{}
	m.SetAPIVersion(kmmGroupVersion)
	m.SetKind("Module")
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: render.ModuleName}, m); err != nil {
		res.fail(fmt.Errorf("read KMM Module: %w", err))
		return false
	}
	desired, _, _ := unstructured.NestedInt64(m.Object, "status", "moduleLoader", "desiredNumber")
	available, _, _ := unstructured.NestedInt64(m.Object, "status", "moduleLoader", "availableNumber")
	switch {
	case desired == 0:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonNoNodes, "KMM Module applied; no node matches "+slicerv1alpha1.LabelMIGCapable+" yet")
	case available >= desired:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, fmt.Sprintf("driver loaded on %d nodes", available))
	default:
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonDriverLoading, fmt.Sprintf("driver loaded on %d of %d nodes", available, desired))
	}
	r.Metrics.SetDependency(metrics.DependencyDriver, st.isTrue(cond))
	// The agent's node affinity waits for KMM's per-node ready label, so it
	// can roll out while the driver loads.
	return true
}

// reconcileWebhook applies the certificate, the webhook workload and, once
// the webhook serves, the admission configurations. It reports whether the
// webhook is available.
func (r *SlicerReconciler) reconcileWebhook(ctx context.Context, s *slicerv1alpha1.Slicer, o *render.Options, st *status, res *result, apply applyFunc) bool {
	const cond = slicerv1alpha1.ConditionWebhookAvailable
	_, fallback := resolveCertProvider(s.Spec.Webhook.CertificateProvider, o.Platform)
	if o.Cert == render.CertSelfManaged {
		bundle, err := r.reconcileCert(ctx, s, *o, apply, res)
		if err != nil {
			res.fail(err)
			st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
			return false
		}
		o.CABundle = bundle
	}
	objs, err := render.Webhook(*o)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return false
	}
	if !apply("webhook", objs) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "webhook objects could not be applied")
		return false
	}
	ok, msg, err := r.deploymentAvailable(ctx, o.Namespace, render.WebhookName)
	if err != nil {
		res.fail(err)
		return false
	}
	if !ok {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, msg)
		return false
	}
	if r.Admission == nil {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "the operator was built without the admission configuration renderer")
		return false
	}
	adm, err := render.WebhookAdmission(*o, r.Admission)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return false
	}
	if !apply("admission", adm) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "admission configurations could not be applied")
		return false
	}
	msg = "webhook available and registered"
	if fallback != "" {
		msg += "; " + fallback
	}
	st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, msg)
	return true
}

// reconcileCert keeps the self-managed serving certificate and returns the CA bundle.
func (r *SlicerReconciler) reconcileCert(ctx context.Context, s *slicerv1alpha1.Slicer, o render.Options, apply applyFunc, res *result) ([]byte, error) {
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: render.WebhookCertSecret}, secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("read webhook certificate: %w", err)
	}
	req := certs.Request{DNSNames: render.WebhookDNSNames(o), Validity: orDefault(r.CertValidity, DefaultCertValidity)}
	if s.Spec.Network.EndpointMode == slicerv1alpha1.EndpointModeHostNetwork {
		addr := o.HostNetworkAddress
		if addr == "" {
			addr = "127.0.0.1"
		}
		if ip := net.ParseIP(addr); ip != nil {
			req.IPs = []net.IP{ip}
		} else {
			req.DNSNames = append(req.DNSNames, addr)
		}
	}
	now := r.now()
	out, err := certs.Ensure(secret.Data, req, now)
	if err != nil {
		return nil, err
	}
	desired := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: render.WebhookCertSecret, Namespace: o.Namespace, Labels: map[string]string{render.ManagedByLabel: render.ManagedByValue, render.PartOfLabel: render.PartOfValue}},
		Type:       corev1.SecretTypeTLS,
		Data:       out.Data,
	}
	if !apply("webhook certificate", []client.Object{desired}) {
		return nil, errors.New("webhook certificate could not be stored")
	}
	if out.Rotated && r.Recorder != nil {
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "WebhookCertificateIssued", "IssueCertificate", "issued the webhook serving certificate, valid until %s", out.NotAfter.UTC().Format(time.RFC3339))
	}
	res.requeueAfter(out.RenewAt.Sub(now))
	return out.Data[certs.CAKey], nil
}

func (r *SlicerReconciler) reconcileScheduler(ctx context.Context, o render.Options, st *status, apply applyFunc) bool {
	const cond = slicerv1alpha1.ConditionSchedulerAvailable
	objs, err := render.Scheduler(o)
	if err != nil {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return false
	}
	if !apply("scheduler", objs) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "scheduler objects could not be applied")
		return false
	}
	ok, msg, err := r.deploymentAvailable(ctx, o.Namespace, render.SchedulerName)
	switch {
	case err != nil:
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
	case ok:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, msg)
	default:
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, msg)
	}
	return ok
}

func (r *SlicerReconciler) reconcileAgent(ctx context.Context, o render.Options, st *status, res *result, apply applyFunc) {
	const cond = slicerv1alpha1.ConditionAgentAvailable
	objs, err := render.Agent(o)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return
	}
	if !apply("agent", objs) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "agent objects could not be applied")
		return
	}
	ds := &appsv1.DaemonSet{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.AgentNamespace, Name: render.AgentName}, ds); err != nil {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, "agent DaemonSet not observed yet")
		return
	}
	s := ds.Status
	switch {
	case s.ObservedGeneration < ds.Generation:
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, "agent DaemonSet update not observed yet")
	case s.DesiredNumberScheduled == 0:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonNoNodes, "no node is selected for the agent yet")
	case s.NumberAvailable >= s.DesiredNumberScheduled && s.UpdatedNumberScheduled >= s.DesiredNumberScheduled:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, fmt.Sprintf("agent available on %d nodes", s.NumberAvailable))
	default:
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, fmt.Sprintf("agent available on %d of %d nodes", s.NumberAvailable, s.DesiredNumberScheduled))
	}
}

func (r *SlicerReconciler) reconcileMonitoring(o render.Options, st *status, res *result, apply applyFunc, agentRolledOut bool) {
	const cond = slicerv1alpha1.ConditionMonitoringReady
	var objs []client.Object
	objs = append(objs, render.MetricsServices(o)...)
	objs = append(objs, render.Dashboards(o)...)
	m := o.Slicer.Spec.Monitoring
	wantsCRDs := m.ServiceMonitors != slicerv1alpha1.FeatureDisabled || m.PrometheusRule != slicerv1alpha1.FeatureDisabled
	if o.Platform.Monitoring {
		objs = append(objs, render.ServiceMonitors(o)...)
		rule, err := render.PrometheusRule(o)
		if err != nil {
			res.fail(err)
			st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
			return
		}
		objs = append(objs, rule...)
	}
	if !agentRolledOut {
		kept := objs[:0]
		for _, obj := range objs {
			if obj.GetNamespace() != o.AgentNamespace || o.AgentNamespace == o.Namespace {
				kept = append(kept, obj)
			}
		}
		objs = kept
	}
	if !apply("monitoring", objs) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "monitoring objects could not be applied")
		return
	}
	if wantsCRDs && !o.Platform.Monitoring {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonDependencyMissing, "the Prometheus operator is not installed ("+monitoringGroupVersion+" not served); metrics Services and dashboards applied, ServiceMonitors and PrometheusRule wait for it")
		res.requeueAfter(orDefault(r.DependencyRecheck, DefaultDependencyRecheck))
		return
	}
	st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonApplied, "monitoring objects applied")
}

// deploymentAvailable reports whether a Deployment's current generation is
// available, with a message for the condition.
func (r *SlicerReconciler) deploymentAvailable(ctx context.Context, namespace, name string) (bool, string, error) {
	d := &appsv1.Deployment{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, d); err != nil {
		if apierrors.IsNotFound(err) {
			return false, "Deployment " + name + " not observed yet", nil
		}
		return false, "", fmt.Errorf("read Deployment %s: %w", name, err)
	}
	if d.Status.ObservedGeneration < d.Generation {
		return false, "Deployment " + name + " update not observed yet", nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue && d.Status.AvailableReplicas > 0 {
			return true, fmt.Sprintf("Deployment %s: %d of %d replicas available", name, d.Status.AvailableReplicas, ptrInt(d.Spec.Replicas)), nil
		}
	}
	return false, fmt.Sprintf("Deployment %s: %d of %d replicas available", name, d.Status.AvailableReplicas, ptrInt(d.Spec.Replicas)), nil
}

func ptrInt(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// summarize counts nodes, GPUs and slices in use from NodeAccelerators.
func (r *SlicerReconciler) summarize(ctx context.Context, st *status) error {
	var list slicerv1alpha1.NodeAcceleratorList
	if err := r.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("list NodeAccelerators: %w", err)
	}
	sum := slicerv1alpha1.SlicerSummary{}
	for i := range list.Items {
		na := &list.Items[i]
		sum.Nodes++
		if meta.IsStatusConditionTrue(na.Status.Conditions, slicerv1alpha1.ConditionReady) {
			sum.ReadyNodes++
		}
		for _, g := range na.Status.GPUs {
			sum.GPUs++
			for _, sl := range g.Slices {
				if sl.State == slicerv1alpha1.SliceAllocated {
					sum.SlicesInUse++
				}
			}
		}
	}
	st.next.Summary = sum
	return nil
}

// updateStatus writes the status only when it changed, and emits an Event
// per condition that changed.
func (r *SlicerReconciler) updateStatus(ctx context.Context, s *slicerv1alpha1.Slicer, st *status) error {
	if equality.Semantic.DeepEqual(s.Status, st.next) {
		return nil
	}
	if r.Recorder != nil {
		for _, c := range st.next.Conditions {
			old := meta.FindStatusCondition(s.Status.Conditions, c.Type)
			if old != nil && old.Status == c.Status && old.Reason == c.Reason {
				continue
			}
			kind := corev1.EventTypeNormal
			if (c.Status == metav1.ConditionFalse && c.Type != slicerv1alpha1.ConditionDegraded && c.Type != slicerv1alpha1.ConditionProgressing) ||
				(c.Type == slicerv1alpha1.ConditionDegraded && c.Status == metav1.ConditionTrue) {
				kind = corev1.EventTypeWarning
			}
			r.Recorder.Eventf(s, nil, kind, c.Reason, "UpdateCondition", "%s=%s: %s", c.Type, c.Status, c.Message)
		}
	}
	s.Status = st.next
	if err := r.Client.Status().Update(ctx, s); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}
