package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/podrequest"
)

// unversionedReview decodes v1 and v1beta1 reviews the way controller-runtime's
// admission.Webhook does, so the fuzz body knows which UID the server saw.
type unversionedReview struct{ admissionv1.AdmissionReview }

var _ runtime.Object = &unversionedReview{}

// covers W6: raw bytes never panic the handler, and the answer is a valid
// AdmissionReview carrying the request's UID, or a 400. For every pod it decodes, Mutate's
// invariants hold with and without translation: a pod that names no MIG resource and no whole
// GPU gets an empty patch, and a mutated pod needs no further patch (I9).
func FuzzHandleAdmission(f *testing.F) {
	pods := []any{
		makePod().Container("app", both(nv1g, "1")).Obj(),
		makePod().Init("i", limits(sl3g, "1")).Container("app", requests("slicer.dev/mig-1g.10gb.me", "1")).Obj(),
		makePod().Container("app", both("nvidia.com/mig-3g.41gb", "2")).Obj(),
		makePod().Node("n").Label("slicer.dev/x", "y").Container("app", both(nv1g, "500m")).Obj(),
		makePod().Container("app", both("nvidia.com/gpu", "1")).Obj(),
		makePod().Container("app", both("nvidia.com/gpu", "0")).Obj(),
		makePod().Container("app", both("nvidia.com/gpu", "1", nv1g, "1")).Obj(),
		makePod().Sidecar("s", limits("nvidia.com/gpu", "9")).Container("app", requests("nvidia.com/gpu", "8")).Obj(),
		makePod().Scheduler("default-scheduler").Container("a", limits("nvidia.com/gpu", "2")).Container("b", limits(sl1g, "1")).Obj(),
	}
	for i, p := range pods {
		f.Add(review(f, "uid-"+string(rune('a'+i)), admissionv1.Create, "Pod", p))
	}
	f.Add(review(f, "uid-cm", admissionv1.Create, "ConfigMap", map[string]any{"data": map[string]string{"a": "b"}}))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":{"spec":{"containers":[{"name":"a","resources":{"limits":{"nvidia.com/mig-1g.10gb":"1"}}}]}}}}`))
	f.Add([]byte(`{"request":{"uid":"t","operation":"CREATE","kind":{"kind":"Pod"},"object":{"spec":{"containers":[{"resources":{"limits":{"slicer.dev/mig-7g.80gb":"1e9"`))
	f.Add([]byte(`{}`))
	f.Add([]byte(``))

	scheme := runtime.NewScheme()
	utilruntime.Must(admissionv1.AddToScheme(scheme))
	utilruntime.Must(admissionv1beta1.AddToScheme(scheme))
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	handlers := []http.Handler{
		&admission.Webhook{Handler: &Handler{Settings: translate}, RecoverPanic: ptr.To(false)},
		&admission.Webhook{Handler: &Handler{Settings: noTranslate}, RecoverPanic: ptr.To(false)},
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		var (
			req admission.Request
			in  unversionedReview
		)
		in.Request = &req.AdmissionRequest
		in.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"))
		_, _, decodeErr := decoder.Decode(body, nil, &in)

		for _, h := range handlers {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, PathMutatePod, bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(rec, r) // a panic fails the fuzz target: RecoverPanic is off
			if rec.Code != http.StatusOK {
				t.Fatalf("HTTP status %d", rec.Code)
			}
			out := admissionv1.AdmissionReview{}
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("answer is not an AdmissionReview (%v): %q", err, rec.Body.String())
			}
			resp := out.Response
			code := int32(0)
			if resp.Result != nil {
				code = resp.Result.Code
			}
			switch {
			case code == http.StatusBadRequest:
			case decodeErr != nil:
				t.Fatalf("undecodable request (%v) answered with code %d, want 400", decodeErr, code)
			case resp.UID != req.UID:
				t.Fatalf("answer UID %q, request UID %q", resp.UID, req.UID)
			case code >= http.StatusInternalServerError:
				t.Fatalf("server error %d: %s", code, resp.Result.Message)
			case resp.Allowed && len(resp.Patch) > 0:
				var ops []map[string]any
				if err := json.Unmarshal(resp.Patch, &ops); err != nil {
					t.Fatalf("patch is not a JSON patch: %v", err)
				}
			}
		}
		pod := &corev1.Pod{}
		if decodeErr != nil || len(req.Object.Raw) == 0 || json.Unmarshal(req.Object.Raw, pod) != nil {
			return
		}
		for _, s := range []Settings{translate, noTranslate} {
			ops, err := Mutate(pod, s)
			if err != nil {
				continue
			}
			if len(ops) > 0 && !namesGPUResource(pod) {
				t.Fatalf("a pod without MIG or GPU resources got a patch: %v", ops)
			}
			if again, err := Mutate(applyPatch(t, pod, ops), s); err != nil || len(again) > 0 {
				t.Fatalf("mutating the mutated pod (translate %v) gives %v, %v; want an empty patch", s.TranslateNVIDIA, again, err)
			}
		}
	})
}

// namesGPUResource reports whether a container of any kind names a MIG resource in either
// spelling or whole GPUs, in its limits or requests.
func namesGPUResource(pod *corev1.Pod) bool {
	var lists []corev1.ResourceList
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		lists = append(lists, c.Resources.Limits, c.Resources.Requests)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		lists = append(lists, c.Resources.Limits, c.Resources.Requests)
	}
	for _, list := range lists {
		for res := range list {
			if res == podrequest.WholeGPUResource || strings.HasPrefix(string(res), mig.ResourcePrefix) || strings.HasPrefix(string(res), mig.NVIDIAResourcePrefix) {
				return true
			}
		}
	}
	return false
}
