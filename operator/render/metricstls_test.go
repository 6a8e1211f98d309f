package render

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Every ServiceMonitor verifies its endpoint with the CA ConfigMap the operator publishes next
// to it, for the Service's name. The certificates' Secrets are all in the operator's namespace;
// the scheduler's and the webhook's pods mount theirs, the agent reads its own through the API.
func TestServiceMonitorsVerifyTLS(t *testing.T) {
	o := testOptions()
	verified := map[string]VerifiedMetrics{}
	for _, v := range MetricsTLS(o) {
		verified[v.Service] = v
		if v.SecretNamespace != o.Namespace {
			t.Errorf("%s: certificate in namespace %s, want the operator's %s", v.Service, v.SecretNamespace, o.Namespace)
		}
		ns := map[string]string{ComponentAgent: o.AgentNamespace}[v.Component]
		if ns == "" {
			ns = o.Namespace
		}
		if want := []string{v.Service + "." + ns + ".svc", v.Service + "." + ns + ".svc.cluster.local"}; v.Namespace != ns || !slices.Equal(v.DNSNames(), want) {
			t.Errorf("%s: namespace %s, DNS names %v, want %s, %v", v.Service, v.Namespace, v.DNSNames(), ns, want)
		}
	}
	if len(verified) != 3 {
		t.Fatalf("verified metrics Services %v, want the scheduler's, the webhook's and the agent's", verified)
	}
	for _, sm := range ServiceMonitors(o) {
		u := sm.(*unstructured.Unstructured)
		eps, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
		tlsConfig, _, _ := unstructured.NestedMap(eps[0].(map[string]any), "tlsConfig")
		v, ok := verified[u.GetName()]
		if !ok {
			t.Errorf("ServiceMonitor %s: tlsConfig %v, and no operator-issued certificate", u.GetName(), tlsConfig)
			continue
		}
		if _, skips := tlsConfig["insecureSkipVerify"]; skips {
			t.Errorf("ServiceMonitor %s skips verification: %v", u.GetName(), tlsConfig)
		}
		name, _, _ := unstructured.NestedString(tlsConfig, "ca", "configMap", "name")
		key, _, _ := unstructured.NestedString(tlsConfig, "ca", "configMap", "key")
		server, _, _ := unstructured.NestedString(tlsConfig, "serverName")
		if name != v.CAConfigMap || key != MetricsCAKey || server != u.GetName()+"."+u.GetNamespace()+".svc" || u.GetNamespace() != v.Namespace {
			t.Errorf("ServiceMonitor %s/%s: tlsConfig %v, want CA ConfigMap %s key %s and server name %s", u.GetNamespace(), u.GetName(), tlsConfig, v.CAConfigMap, MetricsCAKey, v.ServerName())
		}
		delete(verified, u.GetName())
	}
	if len(verified) != 0 {
		t.Errorf("no ServiceMonitor for %v", verified)
	}
	cm := MetricsCAConfigMap(MetricsTLS(o)[0], []byte("pem")).(*corev1.ConfigMap)
	if cm.Data[MetricsCAKey] != "pem" || cm.Labels[ManagedByLabel] != ManagedByValue {
		t.Errorf("CA ConfigMap %+v", cm)
	}
	// The Secret carries the managed-by label: the operator's cache sees only such Secrets.
	if s := MetricsCertSecret(MetricsTLS(o)[0], nil).(*corev1.Secret); s.Labels[ManagedByLabel] != ManagedByValue || s.Type != corev1.SecretTypeTLS {
		t.Errorf("certificate Secret %+v", s)
	}

	sched, err := Scheduler(o)
	if err != nil {
		t.Fatal(err)
	}
	hook, err := Webhook(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		component string
		pod       *corev1.PodTemplateSpec
		args      []string
	}{
		{ComponentScheduler, podTemplate(t, sched, "Deployment"), []string{"--tls-cert-file=" + MetricsCertMountPath + "/tls.crt", "--tls-private-key-file=" + MetricsCertMountPath + "/tls.key"}},
		{ComponentWebhook, podTemplate(t, hook, "Deployment"), []string{"--metrics-cert-dir=" + MetricsCertMountPath}},
	} {
		v, _ := metricsTLSOf(o, c.component)
		ctr := c.pod.Spec.Containers[0]
		for _, a := range c.args {
			if !slices.Contains(ctr.Args, a) {
				t.Errorf("%s: no %s in %v", c.component, a, ctr.Args)
			}
		}
		mounted := ""
		for _, m := range ctr.VolumeMounts {
			if m.MountPath == MetricsCertMountPath {
				mounted = m.Name
			}
		}
		found := false
		for _, vol := range c.pod.Spec.Volumes {
			found = found || vol.Name == mounted && vol.Secret != nil && vol.Secret.SecretName == v.Secret
		}
		if !found {
			t.Errorf("%s: Secret %s not mounted at %s (mount %q, volumes %v)", c.component, v.Secret, MetricsCertMountPath, mounted, c.pod.Spec.Volumes)
		}
	}

	// The agent reads its Secret through the API, allowed to get that one Secret only.
	agentV, _ := metricsTLSOf(o, ComponentAgent)
	for _, fo := range []Options{o, testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Frontend = slicerv1alpha1.FrontendDRA })} {
		objs, err := Agent(fo)
		if err != nil {
			t.Fatal(err)
		}
		ctr := podTemplate(t, objs, "DaemonSet").Spec.Containers[0]
		if want := "--metrics-cert-secret=slicer-system/" + agentV.Secret; !slices.Contains(ctr.Args, want) {
			t.Errorf("frontend %q: agent args %v, want %s", fo.Slicer.Spec.Frontend, ctr.Args, want)
		}
		var role *rbacv1.Role
		var binding *rbacv1.RoleBinding
		for _, obj := range RBAC(fo) {
			switch r := obj.(type) {
			case *rbacv1.Role:
				if r.Name == AgentMetricsCertName {
					role = r
				}
			case *rbacv1.RoleBinding:
				if r.Name == AgentMetricsCertName {
					binding = r
				}
			}
		}
		want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{agentV.Secret}, Verbs: []string{"get"}}}
		if role == nil || role.Namespace != o.Namespace || !equality.Semantic.DeepEqual(role.Rules, want) {
			t.Errorf("frontend %q: agent's certificate Role %+v, want in %s the rules %+v", fo.Slicer.Spec.Frontend, role, o.Namespace, want)
		}
		if binding == nil || binding.Namespace != o.Namespace || binding.RoleRef.Name != AgentMetricsCertName ||
			len(binding.Subjects) != 1 || binding.Subjects[0].Name != AgentName || binding.Subjects[0].Namespace != o.AgentNamespace {
			t.Errorf("frontend %q: agent's certificate RoleBinding %+v", fo.Slicer.Spec.Frontend, binding)
		}
	}

	// The DRA frontend runs neither the scheduler nor the webhook: only the agent's certificate.
	dra := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Frontend = slicerv1alpha1.FrontendDRA })
	if got := MetricsTLS(dra); len(got) != 1 || got[0] != agentV {
		t.Errorf("DRA frontend: verified metrics %v, want the agent's only", got)
	}
}

// Switching to the DRA frontend deletes the scheduler's and the webhook's metrics
// certificates and CA bundles with them, and keeps the agent's, which it still uses.
func TestDRARemovesTheDevicePluginFrontendsMetricsCertificates(t *testing.T) {
	o := testOptions()
	removed := map[string]bool{}
	for _, obj := range DevicePluginFrontend(o, nil) {
		removed[obj.GetObjectKind().GroupVersionKind().Kind+" "+obj.GetNamespace()+"/"+obj.GetName()] = true
	}
	for _, v := range MetricsTLS(o) {
		for _, key := range []string{"Secret " + v.SecretNamespace + "/" + v.Secret, "ConfigMap " + v.Namespace + "/" + v.CAConfigMap} {
			if want := v.Component != ComponentAgent; removed[key] != want {
				t.Errorf("%s of %s: removed with the device-plugin frontend %v, want %v", key, v.Component, removed[key], want)
			}
		}
	}
}
