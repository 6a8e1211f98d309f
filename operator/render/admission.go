package render

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webhookconfig "github.com/slicer-operator/slicer/webhook/config"
)

// Admission is the AdmissionRenderer of the webhook issue: the
// MutatingWebhookConfiguration, the ValidatingAdmissionPolicy and its
// binding, from webhook/config; with SchedulerUnavailable set, only the
// policy that rejects MIG pods and its binding.
func Admission(a AdmissionOptions) ([]client.Object, error) {
	translateMode := webhookconfig.TranslateDisabled
	if a.Translate {
		translateMode = webhookconfig.TranslateEnabled
	}
	o := webhookconfig.Options{
		NamePrefix:              a.NamePrefix,
		Namespace:               a.Namespace,
		CABundle:                a.CABundle,
		FailurePolicy:           admissionregistrationv1.FailurePolicyType(a.FailurePolicy),
		SchedulerName:           a.SchedulerName,
		TranslateNVIDIA:         translateMode,
		ExtraExcludedNamespaces: a.ExtraExcludedNamespaces,
	}
	if a.URL != "" {
		o.URL = a.URL
	} else {
		o.ServiceName, o.ServicePort, o.ServicePath = a.ServiceName, a.ServicePort, a.Path
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("webhook configuration options: %w", err)
	}
	var objs []client.Object
	if a.SchedulerUnavailable != "" {
		// No webhook registration: nothing may be sent to a scheduler that
		// does not run. The policy rejects MIG pods and says why.
		vap, binding := webhookconfig.RenderSchedulerUnavailablePolicy(o, a.SchedulerUnavailable)
		objs = []client.Object{vap, binding}
	} else {
		mwc := webhookconfig.RenderMutatingWebhookConfiguration(o)
		vap, binding := webhookconfig.RenderValidatingAdmissionPolicy(o)
		objs = []client.Object{mwc, vap, binding}
	}
	for _, obj := range objs {
		if len(a.Annotations) > 0 {
			ann := obj.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			for k, v := range a.Annotations {
				ann[k] = v
			}
			obj.SetAnnotations(ann)
		}
	}
	return objs, nil
}
