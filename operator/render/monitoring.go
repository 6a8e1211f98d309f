package render

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Dashboard delivery.
const (
	// OpenShiftDashboardNamespace is where the OpenShift console looks for dashboards.
	OpenShiftDashboardNamespace = "openshift-config-managed"
	// OpenShiftDashboardLabel marks a console dashboard ConfigMap.
	OpenShiftDashboardLabel = "console.openshift.io/dashboard"
	// GrafanaDashboardLabel is the Grafana sidecar's default label (kube-prometheus-stack).
	GrafanaDashboardLabel = "grafana_dashboard"
	// MonitoringGroupVersion is the Prometheus operator's API.
	MonitoringGroupVersion = "monitoring.coreos.com/v1"
)

// MetricsServices renders a Service per component for Prometheus to scrape.
// They exist whether or not the Prometheus operator does.
func MetricsServices(o Options) []client.Object {
	if UsesDRA(o) {
		return []client.Object{metricsService(o.AgentNamespace, AgentName+"-metrics", ComponentAgent, "metrics", o.Ports.AgentMetrics)}
	}
	return []client.Object{
		metricsService(o.Namespace, SchedulerName+"-metrics", ComponentScheduler, "https", o.Ports.SchedulerSecure),
		metricsService(o.Namespace, WebhookName+"-metrics", ComponentWebhook, "metrics", o.Ports.WebhookMetrics),
		metricsService(o.AgentNamespace, AgentName+"-metrics", ComponentAgent, "metrics", o.Ports.AgentMetrics),
	}
}

func metricsService(namespace, name, component, portName string, port int32) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion.WithKind("Service")),
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels(component)},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selectorLabels(component),
			Ports: []corev1.ServicePort{{
				Name: "metrics", Port: port, TargetPort: intstr.FromString(portName), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// ServiceMonitors renders one ServiceMonitor per metrics Service; the
// scrape attaches the node name (docs/design/invariants.md, metric conventions).
func ServiceMonitors(o Options) []client.Object {
	if o.Slicer.Spec.Monitoring.ServiceMonitors == slicerv1alpha1.FeatureDisabled {
		return nil
	}
	var objs []client.Object
	for _, svc := range MetricsServices(o) {
		component := svc.GetLabels()[slicerv1alpha1.LabelComponent]
		endpoint := map[string]any{
			"port":            "metrics",
			"scheme":          "https",
			"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
			"tlsConfig":       metricsTLSConfig(o, component),
			"relabelings": []any{map[string]any{
				"sourceLabels": []any{"__meta_kubernetes_pod_node_name"},
				"targetLabel":  "node",
			}},
		}
		if component == ComponentAgent {
			// slicer_agent_slice_info's namespace and pod are the slice's holder, not the
			// agent's pod the scrape would name (it would rename them exported_*); the DCGM
			// recording rules and the slice map join on them (docs/monitoring.md).
			endpoint["honorLabels"] = true
		}
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": MonitoringGroupVersion,
			"kind":       "ServiceMonitor",
			"metadata":   map[string]any{"name": svc.GetName(), "namespace": svc.GetNamespace(), "labels": toAny(labels(component))},
			"spec": map[string]any{
				"selector":  map[string]any{"matchLabels": toAny(selectorLabels(component))},
				"endpoints": []any{endpoint},
			},
		}})
	}
	return objs
}

// metricsTLSConfig is how Prometheus checks a component's certificate: with the CA the
// operator publishes next to the ServiceMonitor (metricstls.go).
func metricsTLSConfig(o Options, component string) map[string]any {
	v, ok := metricsTLSOf(o, component)
	if !ok {
		return map[string]any{} // not one of ours: Prometheus's own roots, never no verification
	}
	return map[string]any{
		"ca":         map[string]any{"configMap": map[string]any{"name": v.CAConfigMap, "key": MetricsCAKey}},
		"serverName": v.ServerName(),
	}
}

// PrometheusRule renders prometheusrules/' PrometheusRule in the operator namespace.
func PrometheusRule(o Options) ([]client.Object, error) {
	if o.Slicer.Spec.Monitoring.PrometheusRule == slicerv1alpha1.FeatureDisabled || len(o.PrometheusRule) == 0 {
		return nil, nil
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(o.PrometheusRule, &u.Object); err != nil {
		return nil, fmt.Errorf("parse PrometheusRule: %w", err)
	}
	if u.GetKind() != "PrometheusRule" {
		return nil, fmt.Errorf("PrometheusRule manifest has kind %q", u.GetKind())
	}
	u.SetNamespace(o.Namespace)
	if u.GetName() == "" {
		u.SetName("slicer")
	}
	if UsesDRA(o) {
		if err := dropAlerts(u, devicePluginFrontendAlerts); err != nil {
			return nil, err
		}
	}
	l := u.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range commonLabels() {
		l[k] = v
	}
	u.SetLabels(l)
	return []client.Object{u}, nil
}

// devicePluginFrontendAlerts watch the scheduler and the webhook, which the DRA frontend does
// not run: they would fire for ever there.
var devicePluginFrontendAlerts = map[string]bool{
	"SlicerSchedulerDown": true, "SlicerWebhookFailing": true, "SlicerWebhookCertificateExpiringSoon": true,
}

// dropAlerts removes the named alerting rules from every group of a PrometheusRule.
func dropAlerts(u *unstructured.Unstructured, drop map[string]bool) error {
	groups, _, err := unstructured.NestedSlice(u.Object, "spec", "groups")
	if err != nil {
		return fmt.Errorf("PrometheusRule groups: %w", err)
	}
	for i, g := range groups {
		group, ok := g.(map[string]any)
		if !ok {
			return fmt.Errorf("PrometheusRule group %d is %T", i, g)
		}
		rules, _, err := unstructured.NestedSlice(group, "rules")
		if err != nil {
			return fmt.Errorf("PrometheusRule group %d rules: %w", i, err)
		}
		kept := rules[:0]
		for _, r := range rules {
			if rule, ok := r.(map[string]any); ok && drop[fmt.Sprint(rule["alert"])] {
				continue
			}
			kept = append(kept, r)
		}
		group["rules"] = kept
		groups[i] = group
	}
	return unstructured.SetNestedSlice(u.Object, groups, "spec", "groups")
}

// Dashboards renders one ConfigMap per dashboard: in
// openshift-config-managed with the console label on OpenShift, next to the
// operator with the Grafana sidecar label elsewhere.
func Dashboards(o Options) []client.Object {
	if o.Slicer.Spec.Monitoring.Dashboards == slicerv1alpha1.FeatureDisabled {
		return nil
	}
	names := make([]string, 0, len(o.Dashboards))
	for n := range o.Dashboards {
		names = append(names, n)
	}
	sort.Strings(names)
	var objs []client.Object
	for _, file := range names {
		l := commonLabels()
		ns := o.Namespace
		if o.Platform.OpenShift {
			ns = OpenShiftDashboardNamespace
			l[OpenShiftDashboardLabel] = "true"
		} else {
			l[GrafanaDashboardLabel] = "1"
		}
		base := strings.TrimSuffix(file, ".json")
		objs = append(objs, &corev1.ConfigMap{
			TypeMeta:   typeMeta(corev1.SchemeGroupVersion.WithKind("ConfigMap")),
			ObjectMeta: metav1.ObjectMeta{Name: DashboardConfigMapName(base), Namespace: ns, Labels: l},
			Data:       map[string]string{base + ".json": string(o.Dashboards[file])},
		})
	}
	return objs
}

// DashboardConfigMapName is the ConfigMap of one dashboard.
func DashboardConfigMapName(base string) string {
	return "slicer-dashboard-" + strings.ToLower(base)
}
