package render

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/kubeversion"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/prometheusrules"
)

func testOptions(mutate ...func(*slicerv1alpha1.Slicer)) Options {
	s := &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}}
	s.Spec.Driver.Mode = slicerv1alpha1.DriverModeKMM
	s.Spec.Driver.InTreeModulesToRemove = []string{"nouveau"}
	s.Spec.Scheduler.Replicas, s.Spec.Webhook.Replicas = 2, 2
	s.Spec.Agent.OrphanGracePeriodSeconds = 300
	for _, m := range mutate {
		m(s)
	}
	return Options{
		Slicer: s, Namespace: "slicer-system", AgentNamespace: "slicer-agent",
		Images: Images{Schedulers: testSchedulerImages(), Webhook: "reg/webhook:v1", Agent: "reg/agent:v1", Driver: "reg/driver"},
		Ports:  DefaultPorts(), Cert: CertSelfManaged, CABundle: []byte("ca"),
		Kubernetes: kubeversion.Version{Minor: kubeversion.Minor{Major: 1, Minor: 37}, GitVersion: "v1.37.2"},
	}
}

func podTemplate(t *testing.T, objs []client.Object, kind string) *corev1.PodTemplateSpec {
	t.Helper()
	for _, o := range objs {
		switch x := o.(type) {
		case *appsv1.Deployment:
			if kind == "Deployment" {
				return &x.Spec.Template
			}
		case *appsv1.DaemonSet:
			if kind == "DaemonSet" {
				return &x.Spec.Template
			}
		}
	}
	t.Fatalf("no %s", kind)
	return nil
}

func TestScheduler(t *testing.T) {
	objs, err := Scheduler(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			if err := yaml.Unmarshal([]byte(cm.Data[schedulerConfigKey]), &cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	le := cfg["leaderElection"].(map[string]any)
	if le["leaderElect"] != true || le["resourceNamespace"] != "slicer-system" {
		t.Errorf("leader election = %v", le)
	}
	tmpl := podTemplate(t, objs, "Deployment")
	if tmpl.Labels[slicerv1alpha1.LabelComponent] != ComponentScheduler || tmpl.Annotations[ConfigHashAnnotation] == "" {
		t.Errorf("template metadata = %+v", tmpl.ObjectMeta)
	}
	var dep *appsv1.Deployment
	var pdbs int
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			dep = d
		}
		if o.GetObjectKind().GroupVersionKind().Kind == "PodDisruptionBudget" {
			pdbs++
		}
	}
	if *dep.Spec.Replicas < 2 || pdbs != 1 {
		t.Errorf("replicas %d, PDBs %d", *dep.Spec.Replicas, pdbs)
	}
	one, _ := Scheduler(testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.Replicas = 1 }))
	for _, o := range one {
		if o.GetObjectKind().GroupVersionKind().Kind == "PodDisruptionBudget" {
			t.Error("PDB rendered for one replica: it would block node drains")
		}
	}
}

func TestWebhook(t *testing.T) {
	objs, err := Webhook(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	tmpl := podTemplate(t, objs, "Deployment")
	if tmpl.Spec.HostNetwork || tmpl.Labels[slicerv1alpha1.LabelComponent] != ComponentWebhook {
		t.Errorf("pod network template = %+v", tmpl)
	}
	if WebhookURL(testOptions()) != "" {
		t.Error("URL in PodNetwork mode")
	}
	hn := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork })
	hn.HostNetworkAddress = "127.0.0.1"
	if got := WebhookURL(hn); got != "https://127.0.0.1:9443/mutate-pod" {
		t.Errorf("URL = %q", got)
	}
	objs, _ = Webhook(hn)
	tmpl = podTemplate(t, objs, "Deployment")
	if !tmpl.Spec.HostNetwork || !contains(tmpl.Spec.Containers[0].Args, "--bind-address=127.0.0.1") {
		t.Errorf("host network template = %+v", tmpl.Spec)
	}
	sca := testOptions()
	sca.Cert = CertServiceCA
	objs, _ = Webhook(sca)
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok && s.Annotations[ServiceCAServingSecretAnnotation] != WebhookCertSecret {
			t.Error("service-ca annotation missing")
		}
	}
	cm := testOptions()
	cm.Cert = CertCertManager
	objs, _ = Webhook(cm)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind] = true
	}
	if !kinds["Certificate"] || !kinds["Issuer"] {
		t.Errorf("cert-manager objects missing: %v", kinds)
	}
	var got AdmissionOptions
	_, err = WebhookAdmission(cm, func(a AdmissionOptions) ([]client.Object, error) { got = a; return nil, nil })
	if err != nil || got.Annotations[CertManagerInjectAnnotation] != "slicer-system/slicer-webhook" || got.CABundle != nil {
		t.Errorf("cert-manager admission options = %+v (%v)", got, err)
	}
	_, _ = WebhookAdmission(testOptions(), func(a AdmissionOptions) ([]client.Object, error) { got = a; return nil, nil })
	if string(got.CABundle) != "ca" || got.FailurePolicy != slicerv1alpha1.FailurePolicyIgnore {
		t.Errorf("self-managed admission options = %+v", got)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestAgent(t *testing.T) {
	objs, err := Agent(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	tmpl := podTemplate(t, objs, "DaemonSet")
	reqs := tmpl.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions
	want := []corev1.NodeSelectorRequirement{
		{Key: slicerv1alpha1.LabelMIGCapable, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}},
		// KMM's label names the Module's namespace, the agent's.
		{Key: "kmm.node.kubernetes.io/slicer-agent.slicer-nvidia.ready", Operator: corev1.NodeSelectorOpExists},
		// Off a node while KMM swaps its driver (docs/driver-upgrade.md).
		{Key: slicerv1alpha1.LabelDriverUpgrade, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"Driver"}},
	}
	if diff := cmp.Diff(want, reqs); diff != "" {
		t.Errorf("KMM affinity:\n%s", diff)
	}
	c := tmpl.Spec.Containers[0]
	if c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("real-driver agent is not privileged: it cannot change MIG geometry")
	}
	paths := map[string]bool{}
	for _, v := range tmpl.Spec.Volumes {
		paths[v.HostPath.Path] = true
	}
	def := KubeletDirsOf(DefaultKubeletRootDir)
	for _, p := range []string{def.DevicePlugins, def.PodResources, defaultCDIDir} {
		if !paths[p] {
			t.Errorf("hostPath %s missing", p)
		}
	}
	if tmpl.Spec.PriorityClassName != "system-node-critical" || tmpl.Labels[slicerv1alpha1.LabelComponent] != ComponentAgent {
		t.Errorf("template = %+v", tmpl)
	}
	ns := objs[0].(*corev1.Namespace)
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("agent namespace labels = %v", ns.Labels)
	}

	pre, _ := Agent(testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Mode = slicerv1alpha1.DriverModePreinstalled }))
	if n := len(podTemplate(t, pre, "DaemonSet").Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions); n != 1 {
		t.Errorf("preinstalled affinity has %d requirements, want the NFD label only", n)
	}
	emu, err := Agent(testOptions(func(s *slicerv1alpha1.Slicer) {
		s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated
		s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 2}, {Model: "A30-24GB", Count: 1}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	ec := podTemplate(t, emu, "DaemonSet").Spec.Containers[0]
	if !contains(ec.Args, "--emulate=H100-80GB:2,A30-24GB:1") {
		t.Errorf("emulated args = %v", ec.Args)
	}
	if ec.SecurityContext.Privileged != nil || *ec.SecurityContext.AllowPrivilegeEscalation {
		t.Error("emulated agent is privileged")
	}
	if _, err := Agent(testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated })); err == nil {
		t.Error("emulated mode without GPUs accepted")
	}
}

// Least privilege: no wildcard, no CRD writes, no escalate/bind/impersonate,
// SCC use only by resource name.
func TestRBACLeastPrivilege(t *testing.T) {
	o := testOptions()
	o.Platform.OpenShift = true
	for _, obj := range RBAC(o) {
		var rules []rbacv1.PolicyRule
		switch r := obj.(type) {
		case *rbacv1.ClusterRole:
			rules = r.Rules
		case *rbacv1.Role:
			rules = r.Rules
		}
		for _, r := range rules {
			for _, s := range append(append(append([]string{}, r.Verbs...), r.Resources...), r.APIGroups...) {
				if s == "*" {
					t.Errorf("%s: wildcard in %+v", obj.GetName(), r)
				}
			}
			for _, v := range r.Verbs {
				if v == "escalate" || v == "bind" || v == "impersonate" {
					t.Errorf("%s: verb %s", obj.GetName(), v)
				}
				if v == "use" && len(r.ResourceNames) == 0 {
					t.Errorf("%s: SCC use without resourceNames", obj.GetName())
				}
			}
			if contains(r.APIGroups, "apiextensions.k8s.io") {
				t.Errorf("%s: CRD access", obj.GetName())
			}
		}
	}
}

func TestMonitoring(t *testing.T) {
	o := testOptions()
	o.Dashboards = map[string][]byte{"slicer-overview.json": []byte("{}")}
	o.PrometheusRule = []byte("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: slicer-rules\nspec:\n  groups: []\n")
	d := Dashboards(o)[0]
	if d.GetNamespace() != "slicer-system" || d.GetLabels()[GrafanaDashboardLabel] != "1" {
		t.Errorf("vanilla dashboard %s/%s %v", d.GetNamespace(), d.GetName(), d.GetLabels())
	}
	o.Platform.OpenShift = true
	d = Dashboards(o)[0]
	if d.GetNamespace() != OpenShiftDashboardNamespace || d.GetLabels()[OpenShiftDashboardLabel] != "true" {
		t.Errorf("OpenShift dashboard %s/%s %v", d.GetNamespace(), d.GetName(), d.GetLabels())
	}
	pr, err := PrometheusRule(o)
	if err != nil || len(pr) != 1 || pr[0].GetNamespace() != "slicer-system" || pr[0].GetName() != "slicer-rules" {
		t.Fatalf("PrometheusRule = %v, %v", pr, err)
	}
	sms := ServiceMonitors(o)
	if len(sms) != len(MetricsServices(o)) {
		t.Errorf("%d ServiceMonitors for %d metrics Services", len(sms), len(MetricsServices(o)))
	}
	// Only the agent's scrape keeps the labels it exposes (slice_info's holder namespace and pod).
	for _, sm := range sms {
		eps, _, _ := unstructured.NestedSlice(sm.(*unstructured.Unstructured).Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Fatalf("ServiceMonitor %s has %d endpoints", sm.GetName(), len(eps))
		}
		honor, _, _ := unstructured.NestedBool(eps[0].(map[string]any), "honorLabels")
		if want := sm.GetLabels()[slicerv1alpha1.LabelComponent] == ComponentAgent; honor != want {
			t.Errorf("ServiceMonitor %s honorLabels = %v, want %v", sm.GetName(), honor, want)
		}
	}
	o.Slicer.Spec.Monitoring = slicerv1alpha1.MonitoringSpec{ServiceMonitors: slicerv1alpha1.FeatureDisabled, PrometheusRule: slicerv1alpha1.FeatureDisabled, Dashboards: slicerv1alpha1.FeatureDisabled}
	pr, _ = PrometheusRule(o)
	if len(ServiceMonitors(o))+len(pr)+len(Dashboards(o)) != 0 {
		t.Error("disabled monitoring objects rendered")
	}
}

func TestAdmission(t *testing.T) {
	o := testOptions()
	objs, err := WebhookAdmission(o, Admission)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, obj := range objs {
		kinds = append(kinds, obj.GetObjectKind().GroupVersionKind().Kind)
		if obj.GetLabels()[ManagedByLabel] != ManagedByValue {
			t.Errorf("%s lacks the managed-by label", obj.GetName())
		}
	}
	if diff := cmp.Diff([]string{"MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, kinds); diff != "" {
		t.Errorf("kinds:\n%s", diff)
	}
	mwc := objs[0].(*admissionregistrationv1.MutatingWebhookConfiguration)
	for _, w := range mwc.Webhooks {
		cc := w.ClientConfig
		if cc.Service == nil || cc.Service.Name != WebhookName || cc.Service.Namespace != "slicer-system" || string(cc.CABundle) != "ca" {
			t.Errorf("webhook %s clientConfig = %+v", w.Name, cc)
		}
	}
	hn := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork })
	objs, err = WebhookAdmission(hn, Admission)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range objs[0].(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks {
		if w.ClientConfig.URL == nil || !strings.HasPrefix(*w.ClientConfig.URL, "https://127.0.0.1:9443/mutate-pod") || w.ClientConfig.Service != nil {
			t.Errorf("host-network clientConfig = %+v", w.ClientConfig)
		}
	}
	sca := testOptions()
	sca.Cert = CertServiceCA
	objs, _ = WebhookAdmission(sca, Admission)
	if objs[0].GetAnnotations()[ServiceCAInjectAnnotation] != "true" {
		t.Error("service-ca inject annotation missing")
	}
}

// DRA frontend: the agent's role adds ResourceSlice writes and claim reads, the scheduler and
// webhook get no role and no metrics Service, the agent runs the DRA plugin with the kubelet
// plugin directories, and every profile Slicer knows has a class for cleanup.
func TestDRAFrontend(t *testing.T) {
	o := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Frontend = slicerv1alpha1.FrontendDRA })
	var roles []string
	for _, obj := range RBAC(o) {
		if cr, ok := obj.(*rbacv1.ClusterRole); ok {
			roles = append(roles, cr.Name)
			if cr.Name == AgentName && !strings.Contains(fmt.Sprint(cr.Rules), "resourceslices") {
				t.Errorf("agent ClusterRole lacks ResourceSlice writes: %v", cr.Rules)
			}
		}
	}
	if fmt.Sprint(roles) != "["+AgentName+"]" {
		t.Errorf("DRA mode ClusterRoles %v, want only the agent's", roles)
	}
	if svcs := MetricsServices(o); len(svcs) != 1 || svcs[0].GetName() != AgentName+"-metrics" {
		t.Errorf("DRA mode metrics Services: %d", len(svcs))
	}
	objs, err := Agent(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			c := ds.Spec.Template.Spec.Containers[0]
			if !strings.Contains(strings.Join(c.Args, " "), "--frontend=dra") || !strings.Contains(fmt.Sprint(c.VolumeMounts), KubeletDirsOf(DefaultKubeletRootDir).PluginsRegistry) {
				t.Errorf("agent in DRA mode: args %v mounts %v", c.Args, c.VolumeMounts)
			}
		}
	}
	if n := len(AllDeviceClasses()); n != len(mig.KnownProfileNames())+1 {
		t.Errorf("%d classes for %d known profiles and whole GPUs", n, len(mig.KnownProfileNames()))
	}
	profiles, unknown := ProfilesOfModels([]string{"H100-80GB", "A100-40GB", "T4"})
	if len(unknown) != 1 || unknown[0] != "T4" || len(profiles) == 0 {
		t.Errorf("ProfilesOfModels: %v, unknown %v", profiles, unknown)
	}
	// The device-plugin frontend keeps its scheduler and webhook roles.
	if n := len(RBAC(testOptions())); n <= len(RBAC(o)) {
		t.Errorf("device-plugin RBAC has %d objects, DRA %d", n, len(RBAC(o)))
	}
}

// DRA mode ships the shipped rules minus the scheduler's and the webhook's alerts (nothing runs
// there for them to watch); the device-plugin frontend ships them all.
func TestPrometheusRuleDRADropsFrontendAlerts(t *testing.T) {
	alerts := func(o Options) map[string]bool {
		objs, err := PrometheusRule(o)
		if err != nil || len(objs) != 1 {
			t.Fatalf("PrometheusRule = %v, %v", objs, err)
		}
		data, err := yaml.Marshal(objs[0])
		if err != nil {
			t.Fatal(err)
		}
		spec, err := prometheusrules.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, n := range spec.AlertNames() {
			out[n] = true
		}
		return out
	}
	dp := testOptions()
	dp.PrometheusRule = prometheusrules.PrometheusRule
	dra := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Frontend = slicerv1alpha1.FrontendDRA })
	dra.PrometheusRule = prometheusrules.PrometheusRule
	all, kept := alerts(dp), alerts(dra)
	for name := range devicePluginFrontendAlerts {
		if !all[name] {
			t.Errorf("alert %s is not in the shipped rules: the DRA filter names a rule that does not exist", name)
		}
		if kept[name] {
			t.Errorf("DRA mode keeps %s", name)
		}
	}
	if len(kept) != len(all)-len(devicePluginFrontendAlerts) {
		t.Errorf("DRA mode keeps %d of %d alerts", len(kept), len(all))
	}
}
