// Package controller reconciles the cluster-scoped Slicer named "default":
// observe the cluster, render the desired objects (operator/render), apply
// them with server-side apply under one field manager, then compute the
// status from what the cluster reports. Conditions are outputs only.
package controller

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
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
	DefaultVersionRecheck    = 5 * time.Minute
	maxRequeue               = 12 * time.Hour
)

// SlicerReconciler installs Slicer from the Slicer CR.
type SlicerReconciler struct {
	Client client.Client
	// APIReader reads past the manager's cache what it does not hold: tenant pods and claims
	// at uninstall, and the nodes whose GPU operator labels Slicer sets (gpuoperator.go; the
	// cache holds only nodes with a GPU model label). The manager's API reader when nil at
	// SetupWithManager, Client when nil still.
	APIReader client.Reader
	Discovery discovery.DiscoveryInterface
	// ServerVersion reads the apiserver's version; Discovery when nil.
	// Tests put a fixed version here to play other Kubernetes minors.
	ServerVersion discovery.ServerVersionInterface
	Recorder      events.EventRecorder
	Metrics       *metrics.Metrics

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
	// VersionRecheck is how often the apiserver's version is read again
	// when nothing else triggers a reconcile (an apiserver upgrade raises
	// no event the operator watches).
	VersionRecheck time.Duration
	// DeletionTimeout bounds how long deletion waits for cluster-scoped objects.
	DeletionTimeout time.Duration
	// UpgradePoll is how often a driver rollout under way is observed again
	// (DefaultUpgradePoll when zero).
	UpgradePoll time.Duration
	// CertValidity of self-managed webhook certificates.
	CertValidity time.Duration
}

// Operator RBAC. The operator also holds every permission it grants to the
// scheduler, webhook and agent (render/rbac.go), since Kubernetes forbids
// granting what one does not have; no wildcards, no CRD writes. Cluster-scoped
// objects it owns under fixed names it may change and delete only by name
// (RBAC cannot limit create by name); rbac_test.go checks the names cover what
// it renders and pins its cluster-wide writes.
//
// +kubebuilder:rbac:groups=slicer.dev,resources=slicers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=slicer.dev,resources=slicers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=slicer.dev,resources=slicers/finalizers,verbs=update
// +kubebuilder:rbac:groups=slicer.dev,resources=nodeaccelerators,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=slicer.dev,resources=nodeaccelerators/status,verbs=patch
// +kubebuilder:rbac:groups=slicer.dev,resources=sliceallocations,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=slicer.dev,resources=sliceallocations/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts;services;configmaps;namespaces,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=slicer-system,resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch;update
// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch;update
// +kubebuilder:rbac:groups="",resources=pods/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=bindings;pods/binding,verbs=create
// +kubebuilder:rbac:groups="",resources=nodes;replicationcontrollers;persistentvolumeclaims;persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=patch
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;daemonsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=replicasets;statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,resourceNames=slicer-scheduler;slicer-webhook;slicer-agent,verbs=update;patch;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingadmissionpolicies;validatingadmissionpolicybindings,resourceNames=slicer-mig-pods;slicer-allocation-guard;slicer-agent-node-guard;slicer-operator-node-guard;slicer-device-access,verbs=update;patch;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=nfd.k8s-sigs.io,resources=nodefeaturerules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kmm.sigs.x-k8s.io,resources=modules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors;prometheusrules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cert-manager.io,resources=issuers;certificates,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=slicer-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses;csinodes;csidrivers;csistoragecapacities;volumeattachments,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices;deviceclasses;devicetaintrules,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=devicetaintrules,verbs=create;update;patch;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=get;list;watch;update;patch;create;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims/status,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims/binding,verbs=update;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=security.openshift.io,resources=securitycontextconstraints,resourceNames=privileged,verbs=use

// SetupWithManager registers the controller. Every managed kind it can
// watch triggers a reconcile of the Slicer (drift is reverted at once), and
// so do NodeAccelerators (status summary, GPU models), Nodes (GPU model
// label), the DRA agent's pods and CRDs (optional APIs installed at run time).
func (r *SlicerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
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
		Owns(&corev1.ResourceQuota{}).
		Owns(&rbacv1.ClusterRole{}).
		Owns(&rbacv1.ClusterRoleBinding{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&admissionregistrationv1.MutatingWebhookConfiguration{}).
		Owns(&admissionregistrationv1.ValidatingAdmissionPolicy{}).
		Owns(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}).
		Owns(&resourceapi.DeviceClass{}).
		// The summary counts and the GPU models (DRA frontend) come from NodeAccelerators;
		// their slice and health reports that change neither do not reconcile.
		Watches(&slicerv1alpha1.NodeAccelerator{}, toSlicer, builder.WithPredicates(acceleratorFactsChanged())).
		// The GPU models of the nodes decide the DeviceClasses (DRA frontend); Slicer's node
		// label and the GPU operator's deploy labels, where those go (gpuoperator.go).
		Watches(&corev1.Node{}, toSlicer, builder.WithPredicates(predicate.Or(gpuModelChanged(), gpuOperatorLabelsChanged(), driverUpgradeLabelsChanged(r.AgentNamespace)))).
		// An agent pod that ran the DRA plugin is gone: its driver's ResourceSlices may go.
		Watches(&corev1.Pod{}, toSlicer, builder.WithPredicates(draAgentGone())).
		Watches(&apiextensionsv1.CustomResourceDefinition{}, toSlicer, builder.WithPredicates(predicate.NewPredicateFuncs(isOptionalCRD))).
		Complete(r)
}

// gpuModelChanged passes Node events that add, change or remove the GPU model label, not
// the heartbeats.
func gpuModelChanged() predicate.Funcs {
	model := func(o client.Object) string { return o.GetLabels()[slicerv1alpha1.LabelGPUModel] }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return model(e.Object) != "" },
		DeleteFunc:  func(e event.DeleteEvent) bool { return model(e.Object) != "" },
		UpdateFunc:  func(e event.UpdateEvent) bool { return model(e.ObjectOld) != model(e.ObjectNew) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// draAgentGone passes the deletion of an agent pod that ran the kubelet DRA plugin.
func draAgentGone() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(e event.DeleteEvent) bool {
			p, ok := e.Object.(*corev1.Pod)
			return ok && p.Labels[slicerv1alpha1.LabelComponent] == render.ComponentAgent && render.RunsDRAPlugin(p)
		},
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
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
	r.recordPlatform(s, platform)
	kube, err := r.observeVersion()
	if err != nil {
		return ctrl.Result{}, err
	}
	opts := r.options(s, platform)
	opts.Kubernetes = kube
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
	supported := r.reconcileVersion(opts, st, res)
	r.reconcileNFD(ctx, opts, st, res, apply)
	driverOK := r.reconcileDriver(ctx, opts, st, res, apply)
	r.reconcilePriority(ctx, opts, res, apply)
	// Next to the NVIDIA GPU operator: its device plugin and MIG manager off Slicer's nodes,
	// before the agent runs there.
	// Nodes outside the manager's cache raise no event, hence the recheck.
	if err := r.reconcileGPUOperatorLabels(ctx, opts); err != nil {
		res.fail(err)
	}
	if render.TurnsGPUOperatorOff(opts) {
		res.requeueAfter(orDefault(r.DependencyRecheck, DefaultDependencyRecheck))
	}
	// schedulerOK: the frontend is in place, so the agent may advertise capacity.
	schedulerOK := false
	// The metrics certificates before the scheduler and webhook pods that mount them.
	agentMetricsCA := r.reconcileMetricsCerts(ctx, s, opts, res, apply)
	if render.UsesDRA(opts) {
		schedulerOK = r.reconcileDRA(ctx, opts, st, res, apply)
	} else {
		r.removeDRA(ctx, opts, st, res)
		schedulerOK = r.reconcileDevicePluginFrontend(ctx, s, &opts, st, res, apply, supported)
	}
	switch {
	case !supported:
		st.set(slicerv1alpha1.ConditionAgentAvailable, metav1.ConditionFalse, slicerv1alpha1.ReasonUnsupportedKubernetesVersion,
			"the agent is not rolled out or updated while no scheduler runs; an agent already running keeps serving the slices in use")
	case !schedulerOK:
		waiting := "waiting for the scheduler to be available"
		if render.UsesDRA(opts) {
			waiting = "waiting for the DRA frontend: " + st.message(slicerv1alpha1.ConditionDeviceClassesReady)
		}
		st.set(slicerv1alpha1.ConditionAgentAvailable, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, waiting)
	case !driverOK:
		st.set(slicerv1alpha1.ConditionAgentAvailable, metav1.ConditionFalse, slicerv1alpha1.ReasonDependencyMissing, "waiting for the driver: "+st.message(slicerv1alpha1.ConditionDriverReady))
	default:
		r.reconcileAgent(ctx, opts, st, res, apply)
	}
	// The agent's metrics objects live in its namespace: only once it exists.
	r.reconcileMonitoring(opts, st, res, apply, schedulerOK && driverOK, agentMetricsCA)
	if err := r.summarize(ctx, st); err != nil {
		res.fail(err)
	}
	if (wantsNFD(s) && !platform.NFD) || (wantsKMM(s) && !platform.KMM) {
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

// reconcileDevicePluginFrontend runs the webhook, its admission configuration and the
// scheduler, and reports whether the scheduler is available. Order: webhook and VAP before
// the scheduler before the agent, so no MIG pod reaches the default scheduler and no capacity
// is advertised before pods can be steered to Slicer's scheduler. Without a scheduler build,
// the rejecting policy goes in before the scheduler goes away.
func (r *SlicerReconciler) reconcileDevicePluginFrontend(ctx context.Context, s *slicerv1alpha1.Slicer, opts *render.Options, st *status, res *result, apply applyFunc, supported bool) bool {
	webhookOK, admitted := r.reconcileWebhook(ctx, s, opts, st, res, apply)
	switch {
	case !supported:
		r.removeScheduler(ctx, *opts, st, res, admitted)
	case webhookOK:
		return r.reconcileScheduler(ctx, *opts, st, apply)
	default:
		st.set(slicerv1alpha1.ConditionSchedulerAvailable, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, "waiting for the webhook to be available")
	}
	return false
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

// recordPlatform sets slicer_operator_dependency_ready for each optional
// API the spec uses, and drops the series of those it does not use, so
// that an API nobody asked for raises no alert.
func (r *SlicerReconciler) recordPlatform(s *slicerv1alpha1.Slicer, p render.Platform) {
	record := func(dependency string, used, served bool) {
		if used {
			r.Metrics.SetDependency(dependency, served)
		} else {
			r.Metrics.ForgetDependency(dependency)
		}
	}
	record(metrics.DependencyNFD, wantsNFD(s), p.NFD)
	record(metrics.DependencyKMM, wantsKMM(s), p.KMM)
	record(metrics.DependencyPrometheusOperator, wantsPrometheusOperator(s), p.Monitoring)
	record(metrics.DependencyCertManager, s.Spec.Webhook.CertificateProvider == slicerv1alpha1.CertificateProviderCertManager, p.CertManager)
}

type applyFunc func(component string, objs []client.Object) bool

// summarize counts nodes, GPUs and slices in use from NodeAccelerators.
func (r *SlicerReconciler) summarize(ctx context.Context, st *status) error {
	accels, err := r.observeAccelerators(ctx)
	if err != nil {
		return err
	}
	st.next.Summary = summaryOf(accels)
	return nil
}

// observeAccelerators reads the facts of every NodeAccelerator.
func (r *SlicerReconciler) observeAccelerators(ctx context.Context) ([]acceleratorFacts, error) {
	var list slicerv1alpha1.NodeAcceleratorList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list NodeAccelerators: %w", err)
	}
	out := make([]acceleratorFacts, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, factsOf(&list.Items[i]))
	}
	return out, nil
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
