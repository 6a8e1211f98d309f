package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/certs"
	"github.com/slicer-operator/slicer/operator/metrics"
	"github.com/slicer-operator/slicer/operator/render"
)

// The reconcile steps of each component, in the order Reconcile runs them: NFD rule, driver
// (KMM Module), webhook and its admission configuration, scheduler, agent, monitoring.

// reconcileNFD applies the NodeFeatureRule, or removes it when the spec
// opts out of NFD (spec.nodeSelection.nodeFeatureRule: Disabled).
func (r *SlicerReconciler) reconcileNFD(ctx context.Context, o render.Options, st *status, res *result, apply applyFunc) {
	const cond = slicerv1alpha1.ConditionNodeFeatureRuleReady
	if !wantsNFD(o.Slicer) {
		if o.Platform.NFD {
			rule, err := render.NodeFeatureRule(o)
			if err == nil {
				err = r.removeAll(ctx, []client.Object{rule})
			}
			if err != nil {
				res.fail(err)
				st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "spec.nodeSelection.nodeFeatureRule is Disabled but the NodeFeatureRule could not be removed: "+err.Error())
				return
			}
		}
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonDisabled, "spec.nodeSelection.nodeFeatureRule is Disabled: no NodeFeatureRule, NFD not needed; the agent runs on nodes labelled "+slicerv1alpha1.LabelMIGCapable+"=true by other means")
		return
	}
	if !o.Platform.NFD {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonDependencyMissing, "Node Feature Discovery is not installed ("+nfdGroupVersion+" not served), so no node gets "+slicerv1alpha1.LabelMIGCapable+
			": install NFD (its NodeFeatureRule CRD and nfd-master), or set spec.nodeSelection.nodeFeatureRule to Disabled and label the GPU nodes "+slicerv1alpha1.LabelMIGCapable+"=true another way")
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
	if o.Slicer.Spec.Driver.Mode != slicerv1alpha1.DriverModeKMM || !o.Platform.KMM {
		// Nothing to upgrade node by node.
		st.remove(slicerv1alpha1.ConditionDriverUpgraded)
		r.Metrics.ForgetUpgrade()
	}
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
	round, held := r.prepareUpgrade(ctx, o, st, res)
	if held {
		return false
	}
	if !apply("driver", objs) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "KMM Module could not be applied")
		return false
	}
	if o.AgentNamespace != o.Namespace {
		if err := r.removeAll(ctx, render.LegacyDriver(o)); err != nil {
			res.fail(fmt.Errorf("remove the driver objects of the operator's namespace: %w", err))
		}
	}
	m := &unstructured.Unstructured{}
	m.SetAPIVersion(kmmGroupVersion)
	m.SetKind("Module")
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.AgentNamespace, Name: render.ModuleName}, m); err != nil {
		res.fail(fmt.Errorf("read KMM Module: %w", err))
		return false
	}
	desired, _, _ := unstructured.NestedInt64(m.Object, "status", "moduleLoader", "desiredNumber")
	available, _, _ := unstructured.NestedInt64(m.Object, "status", "moduleLoader", "availableNumber")
	// Nodes whose driver the rollout swaps are expected without it: the others serve.
	swapping := int64(r.finishUpgrade(ctx, o, round, st, res))
	switch {
	case desired == 0:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonNoNodes, "KMM Module applied; no node matches "+slicerv1alpha1.LabelMIGCapable+" yet")
	case available >= desired:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, fmt.Sprintf("driver loaded on %d nodes", available))
	case swapping > 0 && available+swapping >= desired:
		st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, fmt.Sprintf("driver loaded on %d of %d nodes; the rollout swaps it on the others (%s)", available, desired, slicerv1alpha1.ConditionDriverUpgraded))
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
// webhook is available, and whether the admission configurations were
// applied. Without a scheduler build, the admission configuration is only
// the policy that rejects MIG pods, which needs no webhook: it is applied
// at once.
func (r *SlicerReconciler) reconcileWebhook(ctx context.Context, s *slicerv1alpha1.Slicer, o *render.Options, st *status, res *result, apply applyFunc) (available, admitted bool) {
	const cond = slicerv1alpha1.ConditionWebhookAvailable
	_, fallback := resolveCertProvider(s.Spec.Webhook.CertificateProvider, o.Platform)
	if o.Cert == render.CertSelfManaged {
		bundle, err := r.reconcileCert(ctx, s, *o, apply, res)
		if err != nil {
			res.fail(err)
			st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
			return false, false
		}
		o.CABundle = bundle
	}
	objs, err := render.Webhook(*o)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return false, false
	}
	if !apply("webhook", objs) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "webhook objects could not be applied")
		return false, false
	}
	supported := render.SchedulerSupported(*o)
	if !supported {
		if admitted = r.applyAdmission(*o, st, res, apply); !admitted {
			return false, false
		}
	}
	ok, msg, err := r.deploymentAvailable(ctx, o.Namespace, render.WebhookName)
	if err != nil {
		res.fail(err)
		return false, admitted
	}
	if !ok {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonRollingOut, msg)
		return false, admitted
	}
	if supported {
		if !r.applyAdmission(*o, st, res, apply) {
			return false, false
		}
		msg = "webhook available and registered"
	} else {
		msg = "webhook available, not registered: " + render.UnsupportedMessage(*o)
	}
	if fallback != "" {
		msg += "; " + fallback
	}
	st.set(cond, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, msg)
	return true, true
}

// applyAdmission applies the admission configurations and reports whether
// they were applied.
func (r *SlicerReconciler) applyAdmission(o render.Options, st *status, res *result, apply applyFunc) bool {
	const cond = slicerv1alpha1.ConditionWebhookAvailable
	if r.Admission == nil {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "the operator was built without the admission configuration renderer")
		return false
	}
	adm, err := render.WebhookAdmission(o, r.Admission)
	if err != nil {
		res.fail(err)
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, err.Error())
		return false
	}
	if !apply("admission", adm) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "admission configurations could not be applied")
		return false
	}
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

// reconcileMonitoring applies the metrics Services, dashboards, ServiceMonitors and rules, and
// metricsCA, the CA ConfigMaps of verified metrics Services in the agent's namespace
// (reconcileMetricsCerts).
func (r *SlicerReconciler) reconcileMonitoring(o render.Options, st *status, res *result, apply applyFunc, agentRolledOut bool, metricsCA []client.Object) {
	const cond = slicerv1alpha1.ConditionMonitoringReady
	var objs []client.Object
	objs = append(objs, render.MetricsServices(o)...)
	objs = append(objs, metricsCA...)
	objs = append(objs, render.Dashboards(o)...)
	wantsCRDs := wantsPrometheusOperator(o.Slicer)
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
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonDependencyMissing, "the Prometheus operator is not installed ("+monitoringGroupVersion+" not served): metrics Services and dashboards are applied, ServiceMonitors and the PrometheusRule wait for it. "+
			"Install the Prometheus operator (CRDs servicemonitors.monitoring.coreos.com and prometheusrules.monitoring.coreos.com), or set spec.monitoring.serviceMonitors and spec.monitoring.prometheusRule to Disabled")
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
