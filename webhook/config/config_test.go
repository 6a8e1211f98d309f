package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	mentionsBoth = "(has(object.spec.containers) && object.spec.containers.exists(c, has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('slicer.dev/mig-') || k.startsWith('nvidia.com/mig-'))) || (has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('slicer.dev/mig-') || k.startsWith('nvidia.com/mig-')))))) || " +
		"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('slicer.dev/mig-') || k.startsWith('nvidia.com/mig-'))) || (has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('slicer.dev/mig-') || k.startsWith('nvidia.com/mig-')))))) || " +
		"(has(object.spec.ephemeralContainers) && object.spec.ephemeralContainers.exists(c, has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('slicer.dev/mig-') || k.startsWith('nvidia.com/mig-'))) || (has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('slicer.dev/mig-') || k.startsWith('nvidia.com/mig-'))))))"
)

func wantWebhook(name, path string, nsExtra *metav1.LabelSelectorRequirement, mentions string, fp admissionregistrationv1.FailurePolicyType) admissionregistrationv1.MutatingWebhook {
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
		Values: []string{"kube-node-lease", "kube-public", "kube-system", "slicer-system"},
	}}}
	if nsExtra != nil {
		sel.MatchExpressions = append(sel.MatchExpressions, *nsExtra)
	}
	return admissionregistrationv1.MutatingWebhook{
		Name: name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: "slicer-system", Name: "slicer-webhook", Port: ptr.To[int32](443), Path: ptr.To(path)},
			CABundle: []byte("CA"),
		},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{"CREATE"},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}},
		FailurePolicy:     ptr.To(fp),
		MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
		NamespaceSelector: sel,
		ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "slicer.dev/component", Operator: metav1.LabelSelectorOpDoesNotExist,
		}}},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](5),
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		MatchConditions: []admissionregistrationv1.MatchCondition{
			{Name: "not-a-system-namespace", Expression: "!request.namespace.startsWith('kube-') && !request.namespace.startsWith('openshift-')"},
			{Name: "not-a-mirror-pod", Expression: "!has(object.metadata.annotations) || !('kubernetes.io/config.mirror' in object.metadata.annotations)"},
			{Name: "requests-mig", Expression: mentions},
		},
	}
}

var (
	translateOn  = &metav1.LabelSelectorRequirement{Key: "slicer.dev/translate-nvidia-resources", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"disabled"}}
	translateOff = &metav1.LabelSelectorRequirement{Key: "slicer.dev/translate-nvidia-resources", Operator: metav1.LabelSelectorOpIn, Values: []string{"disabled"}}
	mentionsOnly = strings.ReplaceAll(mentionsBoth, " || k.startsWith('nvidia.com/mig-')", "")
	// mentionsGPU: a resource named exactly nvidia.com/gpu (a whole GPU, routed where translated).
	mentionsGPU = strings.ReplaceAll(mentionsOnly, "k.startsWith('slicer.dev/mig-')", "k == 'nvidia.com/gpu'")
)

func TestRenderMutatingWebhookConfiguration(t *testing.T) {
	base := Options{Namespace: "slicer-system", ServiceName: "slicer-webhook", CABundle: []byte("CA")}
	meta := metav1.ObjectMeta{Name: "slicer-mig-pods", Labels: map[string]string{"app.kubernetes.io/part-of": "slicer"}}
	tm := metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"}
	tests := []struct {
		name string
		opts func(o *Options)
		want []admissionregistrationv1.MutatingWebhook
	}{
		{
			name: "defaults: Ignore, translation on",
			opts: func(*Options) {},
			want: []admissionregistrationv1.MutatingWebhook{
				wantWebhook("translate.pods.slicer.dev", "/mutate-pod", translateOn, mentionsBoth+" || "+mentionsGPU, admissionregistrationv1.Ignore),
				wantWebhook("no-translate.pods.slicer.dev", "/mutate-pod-no-translate", translateOff, mentionsOnly, admissionregistrationv1.Ignore),
			},
		},
		{
			name: "Fail, translation off cluster-wide",
			opts: func(o *Options) {
				o.FailurePolicy = admissionregistrationv1.Fail
				o.TranslateNVIDIA = TranslateDisabled
			},
			want: []admissionregistrationv1.MutatingWebhook{
				wantWebhook("no-translate.pods.slicer.dev", "/mutate-pod-no-translate", nil, mentionsOnly, admissionregistrationv1.Fail),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.opts(&o)
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			want := &admissionregistrationv1.MutatingWebhookConfiguration{TypeMeta: tm, ObjectMeta: meta, Webhooks: tc.want}
			if diff := cmp.Diff(want, RenderMutatingWebhookConfiguration(o)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderURLAndExtraNamespaces(t *testing.T) {
	cfg := RenderMutatingWebhookConfiguration(Options{
		NamePrefix: "x", Namespace: "slicer", URL: "https://127.0.0.1:9443/mutate-pod",
		ExtraExcludedNamespaces: []string{"openshift-monitoring", "kube-system", "slicer"},
	})
	if cfg.Name != "x-mig-pods" {
		t.Errorf("name %q", cfg.Name)
	}
	var urls []string
	for _, w := range cfg.Webhooks {
		if w.ClientConfig.Service != nil {
			t.Errorf("%s has a service", w.Name)
		}
		urls = append(urls, *w.ClientConfig.URL)
		if diff := cmp.Diff([]string{"kube-node-lease", "kube-public", "kube-system", "openshift-monitoring", "slicer"}, w.NamespaceSelector.MatchExpressions[0].Values); diff != "" {
			t.Errorf("excluded namespaces (-want +got):\n%s", diff)
		}
	}
	if diff := cmp.Diff([]string{"https://127.0.0.1:9443/mutate-pod", "https://127.0.0.1:9443/mutate-pod-no-translate"}, urls); diff != "" {
		t.Errorf("URLs (-want +got):\n%s", diff)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		{name: "service", o: Options{Namespace: "s", ServiceName: "w"}},
		{name: "url", o: Options{Namespace: "s", URL: "https://127.0.0.1:1/mutate-pod"}},
		{name: "empty", o: Options{}, want: []string{"namespace is required", "exactly one of service name and URL"}},
		{name: "both", o: Options{Namespace: "s", ServiceName: "w", URL: "https://x"}, want: []string{"exactly one"}},
		{name: "http", o: Options{Namespace: "s", URL: "http://x"}, want: []string{"must be https"}},
		{name: "bad enums", o: Options{Namespace: "s", ServiceName: "w", FailurePolicy: "Maybe", TranslateNVIDIA: "on"}, want: []string{`failure policy "Maybe"`, `translate mode "on"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if (err != nil) != (len(tc.want) > 0) {
				t.Fatalf("Validate() = %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not contain %q", err, w)
				}
			}
		})
	}
}

func TestRenderValidatingAdmissionPolicy(t *testing.T) {
	o := Options{Namespace: "slicer-system", ServiceName: "w", SchedulerName: "my-sched"}
	policy, binding := RenderValidatingAdmissionPolicy(o)
	if policy.Name != "slicer-mig-pods" || binding.Spec.PolicyName != policy.Name || binding.Name != policy.Name {
		t.Errorf("names: policy %q, binding %q -> %q", policy.Name, binding.Name, binding.Spec.PolicyName)
	}
	for _, m := range []metav1.ObjectMeta{policy.ObjectMeta, binding.ObjectMeta} {
		if m.Labels["app.kubernetes.io/part-of"] != "slicer" {
			t.Errorf("%s lacks the part-of label", m.Name)
		}
	}
	if diff := cmp.Diff([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, binding.Spec.ValidationActions); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	// Every namespace: kube-* and Slicer's own are no way around the policy.
	if diff := cmp.Diff(&metav1.LabelSelector{}, policy.Spec.MatchConstraints.NamespaceSelector); diff != "" {
		t.Errorf("namespaces (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&metav1.LabelSelector{}, policy.Spec.MatchConstraints.ObjectSelector); diff != "" {
		t.Errorf("the policy must not exclude pods by label (-want +got):\n%s", diff)
	}
	// The translating webhook's conditions but the system-namespace one: MIG resources and
	// whole GPUs, which it routes to the Slicer scheduler there.
	wantConds := slices.Clone(RenderMutatingWebhookConfiguration(o).Webhooks[0].MatchConditions[1:])
	if diff := cmp.Diff(wantConds, policy.Spec.MatchConditions); diff != "" {
		t.Errorf("match conditions differ from the webhook's but the system-namespace one (-want +got):\n%s", diff)
	}
	if got := policy.Spec.Validations[1].Expression; !strings.Contains(got, "object.spec.schedulerName == 'my-sched'") {
		t.Errorf("scheduler rule %q", got)
	}
	// Whole GPUs: only where translated, Slicer's scheduler and no pinned node.
	if got := policy.Spec.Validations[3].Expression; !strings.Contains(got, "!(variables.wholeGPU && variables.translated) || (has(object.spec.schedulerName) && object.spec.schedulerName == 'my-sched' && (!has(object.spec.nodeName)") {
		t.Errorf("whole-GPU rule %q", got)
	}
	if got := policy.Spec.Variables[4]; got.Name != "wholeGPU" || got.Expression != mentionsGPU {
		t.Errorf("wholeGPU variable = %+v, want %q", got, mentionsGPU)
	}
	for _, want := range []string{"namespaceObject.metadata.labels['slicer.dev/translate-nvidia-resources'] != 'disabled'",
		"!request.namespace.startsWith('kube-')", "!(request.namespace in ['kube-node-lease', 'kube-public', 'kube-system', 'slicer-system'])"} {
		if got := policy.Spec.Variables[2].Expression; !strings.Contains(got, want) {
			t.Errorf("translated variable %q lacks %q (nvidia.com/mig-* is NVIDIA's where the webhook does not translate)", got, want)
		}
	}

	// CREATE and UPDATE: the rules of a pod's creation hold on CREATE only (a bound pod has
	// spec.nodeName); a slicer.dev/ key is refused on UPDATE too (issue 39, "Reserved keys").
	if diff := cmp.Diff([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		policy.Spec.MatchConstraints.ResourceRules[0].Operations); diff != "" {
		t.Errorf("operations (-want +got):\n%s", diff)
	}
	last := len(policy.Spec.Validations) - 1
	for i, v := range policy.Spec.Validations[:last] {
		if !strings.HasPrefix(v.Expression, "variables.updating || (") {
			t.Errorf("validation %d holds on UPDATE too: %q", i, v.Expression)
		}
	}
	for _, want := range []string{"!variables.updating || !variables.slicerMIG", "oldObject.metadata.labels[k] == object.metadata.labels[k]",
		"k in ['slicer.dev/movable']", "k.startsWith('slicer.dev/')"} {
		if got := policy.Spec.Validations[last].Expression; !strings.Contains(got, want) {
			t.Errorf("reserved keys on UPDATE %q lacks %q", got, want)
		}
	}

	o.TranslateNVIDIA = TranslateDisabled
	policy, _ = RenderValidatingAdmissionPolicy(o)
	if got := policy.Spec.Variables[2].Expression; got != "false" {
		t.Errorf("translation off cluster-wide: translated = %q, want false", got)
	}
	if diff := cmp.Diff(RenderMutatingWebhookConfiguration(o).Webhooks[0].MatchConditions[1:], policy.Spec.MatchConditions); diff != "" {
		t.Errorf("match conditions differ from the webhook's but the system-namespace one (-want +got):\n%s", diff)
	}
}

// The policy used while no Slicer scheduler runs matches like the regular one, under
// the same name (it replaces it in place), and has one rule that rejects every MIG pod
// Slicer would have placed, saying why.
func TestRenderSchedulerUnavailablePolicy(t *testing.T) {
	o := Options{Namespace: "slicer-system", ServiceName: "w"}
	regular, regularBinding := RenderValidatingAdmissionPolicy(o)
	policy, binding := RenderSchedulerUnavailablePolicy(o, "the apiserver reports Kubernetes v1.38.0")
	if policy.Name != regular.Name || binding.Name != regularBinding.Name || binding.Spec.PolicyName != policy.Name {
		t.Errorf("names: policy %q, binding %q -> %q; want those of the regular policy %q", policy.Name, binding.Name, binding.Spec.PolicyName, regular.Name)
	}
	if diff := cmp.Diff(regular.Spec.MatchConstraints, policy.Spec.MatchConstraints); diff != "" {
		t.Errorf("match constraints differ from the regular policy's (-regular +unavailable):\n%s", diff)
	}
	if diff := cmp.Diff(regular.Spec.MatchConditions, policy.Spec.MatchConditions); diff != "" {
		t.Errorf("match conditions differ (-regular +unavailable):\n%s", diff)
	}
	if diff := cmp.Diff(regular.Spec.Variables, policy.Spec.Variables); diff != "" {
		t.Errorf("variables differ (-regular +unavailable):\n%s", diff)
	}
	if len(policy.Spec.Validations) != 2 {
		t.Fatalf("validations %+v, want the rejection and the reserved keys on UPDATE", policy.Spec.Validations)
	}
	v := policy.Spec.Validations[0]
	if v.Expression != "variables.updating || (!variables.slicerMIG && !(variables.nvidiaMIG && variables.translated))" {
		t.Errorf("expression %q", v.Expression)
	}
	if diff := cmp.Diff(regular.Spec.Validations[len(regular.Spec.Validations)-1], policy.Spec.Validations[1]); diff != "" {
		t.Errorf("the reserved keys on UPDATE differ from the regular policy's (-regular +unavailable):\n%s", diff)
	}
	if !strings.Contains(v.Message, "v1.38.0") || strings.Contains(v.Message, "\n") {
		t.Errorf("message %q must name the reason on one line", v.Message)
	}
}
