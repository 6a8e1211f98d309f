package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// review builds an AdmissionReview for obj (nil for none).
func review(t testing.TB, uid string, op admissionv1.Operation, kind string, obj any) []byte {
	t.Helper()
	var raw []byte
	if obj != nil {
		var err error
		if raw, err = json.Marshal(obj); err != nil {
			t.Fatal(err)
		}
	}
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(uid),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: kind},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: strings.ToLower(kind) + "s"},
			Namespace: "team-a",
			Operation: op,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	b, err := json.Marshal(ar)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// serve posts body to a Register-ed mux at path and returns the HTTP status and review.
func serve(t testing.TB, h http.Handler, path string, body []byte) (int, *admissionv1.AdmissionReview) {
	t.Helper()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, r)
	out := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v: %q", err, rec.Body.String())
	}
	return rec.Code, out
}

// newMux registers the handlers on a plain mux (the webhook server's mux in production).
func newMux(t testing.TB, s Settings, m *Metrics) *http.ServeMux {
	t.Helper()
	mux := http.NewServeMux()
	Register(muxRegisterer{mux}, s, m, logr.Discard())
	return mux
}

type muxRegisterer struct{ *http.ServeMux }

func (m muxRegisterer) Register(path string, h http.Handler) { m.Handle(path, h) }

func TestHandler(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	mux := newMux(t, Settings{SchedulerName: "slicer-scheduler", TranslateNVIDIA: true}, m)
	nvPod := makePod().Container("app", both(nv1g, "1")).Obj()
	tests := []struct {
		name      string
		path      string
		body      []byte
		allowed   bool
		code      int32 // Result.Code when not allowed
		wantPatch []jsonpatch.JsonPatchOperation
		result    string
		message   string // in Result.Message when not allowed
	}{
		{
			name: "nvidia pod translated", path: PathMutatePod, allowed: true, result: ResultMutated,
			body: review(t, "u1", admissionv1.Create, "Pod", nvPod),
			wantPatch: []jsonpatch.JsonPatchOperation{
				remove(lim + esc(nv1g)), add(lim+esc(sl1g), "1"), remove(req + esc(nv1g)), add(req+esc(sl1g), "1"), setScheduler,
			},
		},
		{
			name: "nvidia pod on the no-translate path untouched", path: PathMutatePodNoTranslate, allowed: true, result: ResultSkipped,
			body: review(t, "u2", admissionv1.Create, "Pod", nvPod),
		},
		{
			name: "slicer pod on the no-translate path mutated", path: PathMutatePodNoTranslate, allowed: true, result: ResultMutated,
			body:      review(t, "u3", admissionv1.Create, "Pod", makePod().Container("app", both(sl1g, "1")).Obj()),
			wantPatch: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "plain pod", path: PathMutatePod, allowed: true, result: ResultSkipped,
			body: review(t, "u4", admissionv1.Create, "Pod", makePod().Container("app", both("cpu", "1")).Obj()),
		},
		{
			name: "unknown profile denied", path: PathMutatePod, allowed: false, code: http.StatusForbidden, result: ResultRejected,
			body: review(t, "u5", admissionv1.Create, "Pod", makePod().Container("app", both("nvidia.com/mig-3g.41gb", "1")).Obj()),
		},
		{
			name: "whole-GPU pod routed", path: PathMutatePod, allowed: true, result: ResultMutated,
			body:      review(t, "u10", admissionv1.Create, "Pod", makePod().Container("app", both("nvidia.com/gpu", "2")).Obj()),
			wantPatch: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "whole-GPU pod on the no-translate path untouched", path: PathMutatePodNoTranslate, allowed: true, result: ResultSkipped,
			body: review(t, "u11", admissionv1.Create, "Pod", makePod().Container("app", both("nvidia.com/gpu", "2")).Obj()),
		},
		{
			name: "zero whole GPUs denied", path: PathMutatePod, allowed: false, code: http.StatusForbidden, result: ResultRejected,
			body:    review(t, "u12", admissionv1.Create, "Pod", makePod().Container("app", both("nvidia.com/gpu", "0")).Obj()),
			message: `container "app": nvidia.com/gpu is 0, but the number of whole GPUs must be a positive integer`,
		},
		{
			name: "update is not ours", path: PathMutatePod, allowed: true, result: ResultSkipped,
			body: review(t, "u6", admissionv1.Update, "Pod", nvPod),
		},
		{
			name: "wrong kind", path: PathMutatePod, allowed: true, result: ResultSkipped,
			body: review(t, "u7", admissionv1.Create, "ConfigMap", &corev1.ConfigMap{}),
		},
		{
			name: "no object", path: PathMutatePod, allowed: false, code: http.StatusBadRequest, result: ResultRejected,
			body: review(t, "u8", admissionv1.Create, "Pod", nil),
		},
		{
			name: "object is not a pod", path: PathMutatePod, allowed: false, code: http.StatusBadRequest, result: ResultRejected,
			body: review(t, "u9", admissionv1.Create, "Pod", map[string]any{"spec": 5}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(m.mutations.WithLabelValues(tc.result))
			status, out := serve(t, mux, tc.path, tc.body)
			if status != http.StatusOK || out.Response == nil {
				t.Fatalf("status %d, response %+v", status, out.Response)
			}
			in := &admissionv1.AdmissionReview{}
			if err := json.Unmarshal(tc.body, in); err != nil {
				t.Fatal(err)
			}
			if out.Response.UID != in.Request.UID {
				t.Errorf("UID = %q, want %q", out.Response.UID, in.Request.UID)
			}
			if out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", out.Response.Allowed, tc.allowed, out.Response.Result)
			}
			if !tc.allowed && out.Response.Result.Code != tc.code {
				t.Errorf("code = %d, want %d", out.Response.Result.Code, tc.code)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.message) {
				t.Errorf("message %q\ndoes not contain %q", out.Response.Result.Message, tc.message)
			}
			var got []jsonpatch.JsonPatchOperation
			if len(out.Response.Patch) > 0 {
				if err := json.Unmarshal(out.Response.Patch, &got); err != nil {
					t.Fatal(err)
				}
				if pt := out.Response.PatchType; pt == nil || *pt != admissionv1.PatchTypeJSONPatch {
					t.Errorf("patch type = %v", pt)
				}
			}
			// Values come back from JSON as any; compare through JSON.
			if diff := cmp.Diff(jsonRoundTrip(t, tc.wantPatch), jsonRoundTrip(t, got)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			if after := testutil.ToFloat64(m.mutations.WithLabelValues(tc.result)); after != before+1 {
				t.Errorf("slicer_webhook_mutations_total{result=%q} went %v -> %v", tc.result, before, after)
			}
		})
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP slicer_webhook_mutations_total Pod admission requests answered by the Slicer webhook, by result: mutated (a non-empty patch), skipped (nothing to change) or rejected (denied, or a malformed request).
# TYPE slicer_webhook_mutations_total counter
slicer_webhook_mutations_total{result="mutated"} 3
slicer_webhook_mutations_total{result="rejected"} 4
slicer_webhook_mutations_total{result="skipped"} 5
`), "slicer_webhook_mutations_total"); err != nil {
		t.Error(err)
	}
}

func jsonRoundTrip(t *testing.T, ops []jsonpatch.JsonPatchOperation) []any {
	t.Helper()
	if len(ops) == 0 {
		return nil
	}
	b, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The handler also works without metrics.
func TestHandlerNilMetrics(t *testing.T) {
	h := &admission.Webhook{Handler: &Handler{Settings: translate}, RecoverPanic: ptr.To(false)}
	_, out := serve(t, h, PathMutatePod, review(t, "u", admissionv1.Create, "Pod", makePod().Container("app", both(nv1g, "1")).Obj()))
	if !out.Response.Allowed || len(out.Response.Patch) == 0 {
		t.Fatalf("response %+v", out.Response)
	}
}
