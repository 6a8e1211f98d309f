package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Handler paths. The rendered MutatingWebhookConfiguration sends namespaces
// where nvidia.com/mig-* is translated to PathMutatePod and the others (label
// slicer.dev/translate-nvidia-resources=disabled, or translation off
// cluster-wide) to PathMutatePodNoTranslate, so the apiserver, not a cache in
// the webhook, decides the scope, exactly as the ValidatingAdmissionPolicy does.
const (
	PathMutatePod            = slicerv1alpha1.WebhookPath
	PathMutatePodNoTranslate = PathMutatePod + NoTranslateSuffix
	// NoTranslateSuffix turns the path (or URL) of the translating handler into
	// that of the non-translating one.
	NoTranslateSuffix = slicerv1alpha1.WebhookNoTranslateSuffix
)

// Handler answers pod admission requests with Mutate's patch or rejection.
type Handler struct {
	// Settings of this handler (TranslateNVIDIA false for PathMutatePodNoTranslate).
	Settings Settings
	// Metrics may be nil.
	Metrics *Metrics
	Log     logr.Logger
}

var _ admission.Handler = &Handler{}

// Handle implements admission.Handler.
func (h *Handler) Handle(_ context.Context, req admission.Request) admission.Response {
	log := h.Log.WithValues("uid", req.UID, "namespace", req.Namespace, "name", req.Name)
	if req.Operation != admissionv1.Create || req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.SubResource != "" {
		h.Metrics.observe(ResultSkipped)
		return admission.Allowed("not a pod CREATE")
	}
	if len(req.Object.Raw) == 0 {
		h.Metrics.observe(ResultRejected)
		return admission.Errored(http.StatusBadRequest, errors.New("the admission request has no object"))
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		h.Metrics.observe(ResultRejected)
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode pod: %w", err))
	}
	ops, err := Mutate(pod, h.Settings)
	var rej *Rejection
	if errors.As(err, &rej) {
		h.Metrics.observe(ResultRejected)
		log.V(1).Info("pod rejected", "reasons", rej.Reasons)
		return admission.Denied(rej.Error())
	} else if err != nil {
		h.Metrics.observe(ResultRejected)
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("mutate pod: %w", err))
	}
	if len(ops) == 0 {
		h.Metrics.observe(ResultSkipped)
		return admission.Allowed("nothing to change")
	}
	h.Metrics.observe(ResultMutated)
	log.V(1).Info("pod mutated", "operations", len(ops))
	return admission.Patched("pod made ready for the Slicer scheduler (MIG resources rewritten, scheduler set)", ops...)
}

// Register serves the two pod handlers on srv: PathMutatePod with s as given
// and PathMutatePodNoTranslate with translation off.
func Register(srv interface{ Register(string, http.Handler) }, s Settings, m *Metrics, log logr.Logger) {
	noTranslate := s
	noTranslate.TranslateNVIDIA = false
	srv.Register(PathMutatePod, &admission.Webhook{Handler: &Handler{Settings: s, Metrics: m, Log: log.WithName("translate")}})
	srv.Register(PathMutatePodNoTranslate, &admission.Webhook{Handler: &Handler{Settings: noTranslate, Metrics: m, Log: log.WithName("no-translate")}})
}
