// Package config renders the admission objects Slicer's webhook relies on: the
// MutatingWebhookConfiguration that sends MIG pods to the webhook and the
// ValidatingAdmissionPolicy (+ binding) that rejects what the webhook should
// have rewritten when it is down. Pure functions: the operator applies what
// they return.
package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/podrequest"
	"github.com/slicer-operator/slicer/webhook"
)

// TranslateMode says whether nvidia.com/mig-* requests are rewritten to Slicer's resources.
type TranslateMode string

const (
	// TranslateEnabled rewrites nvidia.com/mig-* everywhere except in namespaces labelled
	// slicer.dev/translate-nvidia-resources=disabled (the default).
	TranslateEnabled TranslateMode = "enabled"
	// TranslateDisabled leaves nvidia.com/mig-* to NVIDIA's device plugin cluster-wide.
	TranslateDisabled TranslateMode = "disabled"
)

// Defaults.
const (
	DefaultNamePrefix = "slicer"
	// TimeoutSeconds is how long the apiserver waits for the webhook.
	TimeoutSeconds int32 = 5
	// LabelPartOf / PartOf mark every rendered object.
	LabelPartOf = "app.kubernetes.io/part-of"
	PartOf      = "slicer"
)

// SystemNamespaces are never intercepted, whatever the options say.
var SystemNamespaces = []string{metav1.NamespaceSystem, "kube-node-lease", metav1.NamespacePublic}

// Options are the inputs of the renderers.
type Options struct {
	// NamePrefix prefixes the objects' names (default "slicer").
	NamePrefix string
	// Namespace is Slicer's own namespace, never intercepted. Required.
	Namespace string
	// ServiceName, ServicePort and ServicePath locate the webhook through a Service in
	// Namespace (port default 443, path default /mutate-pod) ...
	ServiceName string
	ServicePort int32
	ServicePath string
	// ... or URL does, e.g. https://127.0.0.1:9443/mutate-pod (a cluster without Services
	// for control-plane webhooks). The non-translating handler is at the same path with
	// webhook.NoTranslateSuffix appended.
	URL string
	// CABundle verifies the webhook's serving certificate.
	CABundle []byte
	// FailurePolicy when the webhook cannot be reached (default Ignore: the
	// ValidatingAdmissionPolicy still rejects un-mutated MIG pods).
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// SchedulerName is the Slicer scheduler's name (default slicer-scheduler).
	SchedulerName string
	// TranslateNVIDIA (default enabled).
	TranslateNVIDIA TranslateMode
	// ExtraExcludedNamespaces are never intercepted either (e.g. the OpenShift
	// namespaces that a label selector cannot match by prefix; kube-* and
	// openshift-* are also excluded by a match condition).
	ExtraExcludedNamespaces []string
}

// Validate reports options the renderers cannot honour.
func (o Options) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("namespace is required"))
	}
	if (o.URL == "") == (o.ServiceName == "") {
		errs = append(errs, errors.New("set exactly one of service name and URL"))
	}
	if o.URL != "" && !strings.HasPrefix(o.URL, "https://") {
		errs = append(errs, fmt.Errorf("webhook URL %q must be https", o.URL))
	}
	switch o.FailurePolicy {
	case "", admissionregistrationv1.Ignore, admissionregistrationv1.Fail:
	default:
		errs = append(errs, fmt.Errorf("failure policy %q is neither Ignore nor Fail", o.FailurePolicy))
	}
	switch o.TranslateNVIDIA {
	case "", TranslateEnabled, TranslateDisabled:
	default:
		errs = append(errs, fmt.Errorf("translate mode %q is neither enabled nor disabled", o.TranslateNVIDIA))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.NamePrefix == "" {
		o.NamePrefix = DefaultNamePrefix
	}
	if o.ServicePort == 0 {
		o.ServicePort = 443
	}
	if o.ServicePath == "" {
		o.ServicePath = webhook.PathMutatePod
	}
	if o.FailurePolicy == "" {
		o.FailurePolicy = admissionregistrationv1.Ignore
	}
	if o.SchedulerName == "" {
		o.SchedulerName = webhook.DefaultSchedulerName
	}
	if o.TranslateNVIDIA == "" {
		o.TranslateNVIDIA = TranslateEnabled
	}
	return o
}

// ObjectName is the name of the webhook configuration, the policy and its binding.
func ObjectName(o Options) string { return o.withDefaults().NamePrefix + "-mig-pods" }

// Webhook names inside the configuration.
const (
	WebhookTranslate   = "translate.pods.slicer.dev"
	WebhookNoTranslate = "no-translate.pods.slicer.dev"
)

// RenderMutatingWebhookConfiguration renders the configuration that sends pod CREATEs that
// mention a MIG resource to the webhook. With translation enabled it holds two webhooks:
// one for namespaces where nvidia.com/mig-* is translated (path /mutate-pod) and one for
// namespaces labelled slicer.dev/translate-nvidia-resources=disabled (path
// /mutate-pod-no-translate, called only for slicer.dev/mig-*). With translation disabled
// cluster-wide only the second remains, for every namespace.
func RenderMutatingWebhookConfiguration(o Options) *admissionregistrationv1.MutatingWebhookConfiguration {
	o = o.withDefaults()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ObjectName(o), Labels: map[string]string{LabelPartOf: PartOf}},
	}
	if o.TranslateNVIDIA == TranslateEnabled {
		// Where Slicer serves NVIDIA's names it routes whole-GPU pods too (webhook.Settings).
		cfg.Webhooks = append(cfg.Webhooks, mutatingWebhook(o, WebhookTranslate, "",
			&metav1.LabelSelectorRequirement{Key: slicerv1alpha1.LabelTranslateNVIDIAResources, Operator: metav1.LabelSelectorOpNotIn, Values: []string{string(TranslateDisabled)}},
			celMentions(mig.ResourcePrefix, mig.NVIDIAResourcePrefix)+" || "+celNames(string(podrequest.WholeGPUResource))))
		cfg.Webhooks = append(cfg.Webhooks, mutatingWebhook(o, WebhookNoTranslate, webhook.NoTranslateSuffix,
			&metav1.LabelSelectorRequirement{Key: slicerv1alpha1.LabelTranslateNVIDIAResources, Operator: metav1.LabelSelectorOpIn, Values: []string{string(TranslateDisabled)}},
			celMentions(mig.ResourcePrefix)))
	} else {
		cfg.Webhooks = append(cfg.Webhooks, mutatingWebhook(o, WebhookNoTranslate, webhook.NoTranslateSuffix, nil, celMentions(mig.ResourcePrefix)))
	}
	return cfg
}

// mutatingWebhook renders one webhook for the pods that mentions (a CEL expression) matches;
// nsReq further narrows the namespaces (nil: all but the excluded).
func mutatingWebhook(o Options, name, pathSuffix string, nsReq *metav1.LabelSelectorRequirement, mentions string) admissionregistrationv1.MutatingWebhook {
	sel := excludedNamespaces(o)
	if nsReq != nil {
		sel.MatchExpressions = append(sel.MatchExpressions, *nsReq)
	}
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
	if o.URL != "" {
		cc.URL = ptr.To(o.URL + pathSuffix)
	} else {
		cc.Service = &admissionregistrationv1.ServiceReference{
			Namespace: o.Namespace, Name: o.ServiceName, Port: ptr.To(o.ServicePort), Path: ptr.To(o.ServicePath + pathSuffix),
		}
	}
	return admissionregistrationv1.MutatingWebhook{
		Name:         name,
		ClientConfig: cc,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}},
		FailurePolicy:           ptr.To(o.FailurePolicy),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		NamespaceSelector:       sel,
		ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: slicerv1alpha1.LabelComponent, Operator: metav1.LabelSelectorOpDoesNotExist}}},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To(TimeoutSeconds),
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		MatchConditions:         matchConditions(mentions),
	}
}

// excludedNamespaces selects every namespace but the system ones, Slicer's and the extras.
func excludedNamespaces(o Options) *metav1.LabelSelector {
	ns := append(append(append([]string{}, SystemNamespaces...), o.Namespace), o.ExtraExcludedNamespaces...)
	sort.Strings(ns)
	uniq := ns[:0]
	for i, n := range ns {
		if n != "" && (i == 0 || n != ns[i-1]) {
			uniq = append(uniq, n)
		}
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: uniq,
	}}}
}

// Match conditions shared by the webhook and the policy.
const (
	conditionNotSystem = "not-a-system-namespace"
	conditionNotMirror = "not-a-mirror-pod"
	conditionMIG       = "requests-mig"
	// celNotSystem also covers the namespaces a label selector cannot match by prefix.
	celNotSystem = `!request.namespace.startsWith('kube-') && !request.namespace.startsWith('openshift-')`
	celNotMirror = `!has(object.metadata.annotations) || !('` + corev1.MirrorPodAnnotationKey + `' in object.metadata.annotations)`
)

// matchConditions are a webhook's for the pods that mentions (a CEL expression) matches.
func matchConditions(mentions string) []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{
		{Name: conditionNotSystem, Expression: celNotSystem},
		{Name: conditionNotMirror, Expression: celNotMirror},
		{Name: conditionMIG, Expression: mentions},
	}
}

// policyMatchConditions are the webhook's, in every namespace, for the MIG resources of
// prefixes and the resources named exactly names (whole GPUs, where the webhook routes them).
func policyMatchConditions(prefixes, names []string) []admissionregistrationv1.MatchCondition {
	mentions := celMentions(prefixes...)
	if len(names) > 0 {
		mentions += " || " + celNames(names...)
	}
	var out []admissionregistrationv1.MatchCondition
	for _, c := range matchConditions(mentions) {
		if c.Name != conditionNotSystem {
			out = append(out, c)
		}
	}
	return out
}

// celList is a CEL list of string literals (namespace names hold no quote).
func celList(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = "'" + v + "'"
	}
	return strings.Join(q, ", ")
}

// celMentions is a CEL expression, true when a container, init container or ephemeral
// container of the pod (object) has a resource key starting with one of prefixes in its
// limits or requests.
func celMentions(prefixes ...string) string {
	var keyTests []string
	for _, p := range prefixes {
		keyTests = append(keyTests, fmt.Sprintf("k.startsWith('%s')", p))
	}
	return celKeys(strings.Join(keyTests, " || "))
}

// celNames is celMentions for resource keys equal to one of names (nvidia.com/gpu, not
// nvidia.com/gpu.shared).
func celNames(names ...string) string {
	var keyTests []string
	for _, n := range names {
		keyTests = append(keyTests, fmt.Sprintf("k == '%s'", n))
	}
	return celKeys(strings.Join(keyTests, " || "))
}

// celKeys is a CEL expression, true when a container, init container or ephemeral container of
// the pod (object) has a resource key k in its limits or requests for which key holds.
func celKeys(key string) string {
	container := fmt.Sprintf("has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, %[1]s)) || (has(c.resources.requests) && c.resources.requests.exists(k, %[1]s)))", key)
	var lists []string
	for _, l := range []string{"containers", "initContainers", "ephemeralContainers"} {
		lists = append(lists, fmt.Sprintf("(has(object.spec.%[1]s) && object.spec.%[1]s.exists(c, %[2]s))", l, container))
	}
	return strings.Join(lists, " || ")
}
