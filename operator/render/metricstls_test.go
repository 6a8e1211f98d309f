package render

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// The scheduler's and the webhook's ServiceMonitors verify the endpoint with the CA ConfigMap
// the operator publishes next to them, for the Service's name; their pods serve the mounted
// certificate of that Service. Only the agent's scrape still skips verification
// (docs/listeners.md says why).
func TestServiceMonitorsVerifyTLS(t *testing.T) {
	o := testOptions()
	verified := map[string]VerifiedMetrics{}
	for _, v := range MetricsTLS(o) {
		verified[v.Service] = v
		if v.Namespace != o.Namespace {
			t.Errorf("%s: certificate in namespace %s, want the operator's %s", v.Service, v.Namespace, o.Namespace)
		}
		if want := []string{v.Service + ".slicer-system.svc", v.Service + ".slicer-system.svc.cluster.local"}; !slices.Equal(v.DNSNames(), want) {
			t.Errorf("%s: DNS names %v, want %v", v.Service, v.DNSNames(), want)
		}
	}
	if len(verified) != 2 {
		t.Fatalf("verified metrics Services %v, want the scheduler's and the webhook's", verified)
	}
	for _, sm := range ServiceMonitors(o) {
		u := sm.(*unstructured.Unstructured)
		eps, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
		tlsConfig, _, _ := unstructured.NestedMap(eps[0].(map[string]any), "tlsConfig")
		_, skips := tlsConfig["insecureSkipVerify"]
		v, ok := verified[u.GetName()]
		if !ok {
			if u.GetLabels()[slicerv1alpha1.LabelComponent] != ComponentAgent || !skips {
				t.Errorf("ServiceMonitor %s: tlsConfig %v; only the agent's may skip verification", u.GetName(), tlsConfig)
			}
			continue
		}
		if skips {
			t.Errorf("ServiceMonitor %s skips verification: %v", u.GetName(), tlsConfig)
		}
		name, _, _ := unstructured.NestedString(tlsConfig, "ca", "configMap", "name")
		key, _, _ := unstructured.NestedString(tlsConfig, "ca", "configMap", "key")
		server, _, _ := unstructured.NestedString(tlsConfig, "serverName")
		if name != v.CAConfigMap || key != MetricsCAKey || server != u.GetName()+".slicer-system.svc" || u.GetNamespace() != v.Namespace {
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

	// The DRA frontend runs neither: no certificate, and its agent-only monitor is unchanged.
	dra := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Frontend = slicerv1alpha1.FrontendDRA })
	if got := MetricsTLS(dra); len(got) != 0 {
		t.Errorf("DRA frontend: verified metrics %v, want none", got)
	}
}
