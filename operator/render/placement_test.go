package render

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// componentPods are the pod templates of every component the operator renders.
func componentPods(t *testing.T, o Options) map[string]*corev1.PodTemplateSpec {
	t.Helper()
	out := map[string]*corev1.PodTemplateSpec{}
	for name, render := range map[string]func(Options) ([]client.Object, error){ComponentScheduler: Scheduler, ComponentWebhook: Webhook, ComponentAgent: Agent} {
		objs, err := render(o)
		if err != nil {
			t.Fatal(err)
		}
		kind := "Deployment"
		if name == ComponentAgent {
			kind = "DaemonSet"
		}
		out[name] = podTemplate(t, objs, kind)
	}
	return out
}

// No pod of a tenant can preempt Slicer's (issue 39, "Priority"): every component runs at
// system-node-critical, whose value is the highest a pod can have, and a pod preempts only
// pods of strictly lower priority. The operator's own Deployment (config/manager) too.
func TestPriorityClassIsTheHighest(t *testing.T) {
	// The system classes are the only ones above a user's highest (1000000000), and
	// system-node-critical (2000001000) is the higher of the two (k8s.io/kubernetes
	// pkg/apis/scheduling/types.go).
	if PriorityClass != "system-node-critical" || CriticalPriorityClasses[0] != PriorityClass {
		t.Fatalf("PriorityClass = %q, want system-node-critical, the highest", PriorityClass)
	}
	for name, tmpl := range componentPods(t, testOptions()) {
		if got := tmpl.Spec.PriorityClassName; got != PriorityClass {
			t.Errorf("%s: priorityClassName %q, want %q", name, got, PriorityClass)
		}
	}
	var d struct {
		Kind string `json:"kind"`
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	found := false
	for _, doc := range splitYAML(t, filepath.Join("..", "..", "config", "manager", "manager.yaml")) {
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		found = true
		if got := d.Spec.Template.Spec.PriorityClassName; got != PriorityClass {
			t.Errorf("config/manager: the operator's priorityClassName %q, want %q", got, PriorityClass)
		}
		if diff := cmp.Diff(&corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: AvoidGPUNodesTerm()}}},
			d.Spec.Template.Spec.Affinity.NodeAffinity); diff != "" {
			t.Errorf("config/manager: the operator must prefer nodes other than the GPU nodes (-want +got):\n%s", diff)
		}
	}
	if !found {
		t.Fatal("config/manager/manager.yaml holds no Deployment")
	}
}

// The scheduler and the webhook prefer nodes other than Slicer's GPU nodes by default and
// require them when the spec asks (issue 39, "The control plane on GPU nodes"); the agent
// runs only on them.
func TestControlPlaneOffGPUNodes(t *testing.T) {
	preferred := &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: slicerv1alpha1.LabelMIGCapable, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"true"}}},
	}}}}
	required := &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
		preferred.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference,
	}}}
	tol := corev1.Toleration{Key: "node-role.kubernetes.io/infra", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name     string
		spec     slicerv1alpha1.ControlPlaneSpec
		affinity *corev1.NodeAffinity
	}{
		{name: "default", affinity: preferred},
		{name: "preferred", spec: slicerv1alpha1.ControlPlaneSpec{AvoidGPUNodes: slicerv1alpha1.AvoidGPUNodesPreferred}, affinity: preferred},
		{name: "required, on infrastructure nodes", affinity: required, spec: slicerv1alpha1.ControlPlaneSpec{
			AvoidGPUNodes: slicerv1alpha1.AvoidGPUNodesRequired,
			NodeSelector:  map[string]string{"node-role.kubernetes.io/infra": ""},
			Tolerations:   []corev1.Toleration{tol},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := componentPods(t, testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.ControlPlane = tc.spec }))
			for _, name := range []string{ComponentScheduler, ComponentWebhook} {
				spec := pods[name].Spec
				if diff := cmp.Diff(tc.affinity, spec.Affinity.NodeAffinity); diff != "" {
					t.Errorf("%s node affinity (-want +got):\n%s", name, diff)
				}
				if spec.Affinity.PodAntiAffinity == nil {
					t.Errorf("%s: the replicas no longer spread over nodes", name)
				}
				if diff := cmp.Diff(tc.spec.NodeSelector, spec.NodeSelector); diff != "" {
					t.Errorf("%s node selector (-want +got):\n%s", name, diff)
				}
				if diff := cmp.Diff(tc.spec.Tolerations, spec.Tolerations); diff != "" {
					t.Errorf("%s tolerations (-want +got):\n%s", name, diff)
				}
			}
			agent := pods[ComponentAgent].Spec
			if agent.NodeSelector != nil || len(agent.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
				t.Errorf("the agent follows the GPU nodes, not the control plane's placement: %+v", agent.Affinity)
			}
		})
	}
}

// The agent namespace's quota is rendered only when asked, and is the one
// config/components/critical-priority ships for the operator's namespace.
func TestCriticalPriorityQuotas(t *testing.T) {
	if objs := CriticalPriorityQuotas(testOptions()); objs != nil {
		t.Errorf("rendered %d objects with criticalPriorityQuota off", len(objs))
	}
	on := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Priority.CriticalPriorityQuota = slicerv1alpha1.FeatureEnabled })
	objs := CriticalPriorityQuotas(on)
	if len(objs) != 2 || objs[0].GetName() != on.AgentNamespace {
		t.Fatalf("want the agent namespace and its quota, got %v", objs)
	}
	q := objs[1].(*corev1.ResourceQuota)
	if q.Namespace != on.AgentNamespace {
		t.Errorf("quota in %q, want the agent's %q", q.Namespace, on.AgentNamespace)
	}
	var shipped corev1.ResourceQuota
	docs := splitYAML(t, filepath.Join("..", "..", "config", "components", "critical-priority", "quota.yaml"))
	if len(docs) != 1 {
		t.Fatalf("quota.yaml holds %d documents", len(docs))
	}
	if err := yaml.UnmarshalStrict(docs[0], &shipped); err != nil {
		t.Fatal(err)
	}
	if shipped.Name != q.Name || shipped.Namespace != "slicer-system" {
		t.Errorf("config/components/critical-priority/quota.yaml is %s/%s", shipped.Namespace, shipped.Name)
	}
	if diff := cmp.Diff(q.Spec, shipped.Spec); diff != "" {
		t.Errorf("the shipped quota differs from the rendered one (-rendered +shipped):\n%s", diff)
	}
	same := on
	same.AgentNamespace = same.Namespace
	if objs := CriticalPriorityQuotas(same); objs != nil {
		t.Errorf("the agent in the operator's namespace is covered by the install's quota; rendered %v", objs)
	}
}

func splitYAML(t *testing.T, path string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range docSeparator.Split(string(raw), -1) {
		if regexp.MustCompile(`(?m)^[a-z]`).MatchString(d) {
			out = append(out, []byte(d))
		}
	}
	return out
}

var docSeparator = regexp.MustCompile(`(?m)^---$`)
