package webhook

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	evanjsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/podrequest"
	"github.com/slicer-operator/slicer/test/builder"
)

const (
	nv1g   = "nvidia.com/mig-1g.10gb"
	sl1g   = "slicer.dev/mig-1g.10gb"
	sl3g   = "slicer.dev/mig-3g.40gb"
	nv3g   = "nvidia.com/mig-3g.40gb"
	lim    = "/spec/containers/0/resources/limits/"
	req    = "/spec/containers/0/resources/requests/"
	schedP = "/spec/schedulerName"
)

var (
	translate   = Settings{SchedulerName: "slicer-scheduler", TranslateNVIDIA: true}
	noTranslate = Settings{SchedulerName: "slicer-scheduler", TranslateNVIDIA: false}
)

func add(path string, v any) jsonpatch.JsonPatchOperation {
	return jsonpatch.NewOperation("add", path, v)
}
func remove(path string) jsonpatch.JsonPatchOperation {
	return jsonpatch.NewOperation("remove", path, nil)
}
func esc(k string) string { return escapePointer(k) }

var setScheduler = add(schedP, "slicer-scheduler")

// mutateCase is a pod Mutate admits, with the patch it must return.
type mutateCase struct {
	name     string
	pod      *corev1.Pod
	settings Settings
	want     []jsonpatch.JsonPatchOperation
}

// rejectCase is a pod Mutate refuses, with substrings of the message.
type rejectCase struct {
	name     string
	pod      *corev1.Pod
	settings Settings
	want     []string
}

// covers W4, W9, W11, I9
func TestMutate(t *testing.T) {
	testMutate(t, []mutateCase{
		{name: "no resources", pod: makePod().Container("app", builder.None).Obj(), settings: translate},
		{name: "cpu only", pod: makePod().Container("app", both("cpu", "1")).Obj(), settings: translate},
		{
			name: "slicer.dev/movable is the user's to set", settings: translate,
			pod:  makePod().Annotation(slicerv1alpha1.AnnotationMovable, "false").Container("app", both(sl1g, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "nvidia.com in limits and requests is translated", settings: translate,
			pod: makePod().Container("app", both(nv1g, "1", "cpu", "2")).Obj(),
			want: []jsonpatch.JsonPatchOperation{
				remove(lim + esc(nv1g)), add(lim+esc(sl1g), "1"),
				remove(req + esc(nv1g)), add(req+esc(sl1g), "1"),
				setScheduler,
			},
		},
		{
			name: "nvidia.com in limits only (requests map absent)", settings: translate,
			pod: makePod().Container("app", limits(nv1g, "2")).Obj(),
			want: []jsonpatch.JsonPatchOperation{
				remove(lim + esc(nv1g)), add(lim+esc(sl1g), "2"),
				add("/spec/containers/0/resources/requests", map[string]string{sl1g: "2"}),
				setScheduler,
			},
		},
		{
			name: "slicer.dev in requests only gets limits", settings: translate,
			pod: makePod().Container("app", requests(sl3g, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{
				add("/spec/containers/0/resources/limits", map[string]string{sl3g: "1"}),
				setScheduler,
			},
		},
		{
			name: "slicer.dev in requests only, limits holds cpu", settings: translate,
			pod:  makePod().Container("app", limits("cpu", "1").AndRequests(sl3g, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{add(lim+esc(sl3g), "1"), setScheduler},
		},
		{
			name: "slicer.dev with requests = limits only needs the scheduler", settings: translate,
			pod:  makePod().Container("app", both(sl1g, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "default-scheduler is replaced", settings: translate,
			pod:  makePod().Scheduler("default-scheduler").Container("app", both(sl1g, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "already mutated: empty patch", settings: translate,
			pod: makePod().Scheduler("slicer-scheduler").Container("app", both(sl1g, "1")).Obj(),
		},
		{
			name: "+me profile spelled .me", settings: translate,
			pod: makePod().Container("app", both("nvidia.com/mig-1g.10gb.me", "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{
				remove(lim + esc("nvidia.com/mig-1g.10gb.me")), add(lim+esc("slicer.dev/mig-1g.10gb.me"), "1"),
				remove(req + esc("nvidia.com/mig-1g.10gb.me")), add(req+esc("slicer.dev/mig-1g.10gb.me"), "1"),
				setScheduler,
			},
		},
		{
			name: "init container only", settings: translate,
			pod: makePod().Init("warmup", both(nv3g, "1")).Container("app", both("cpu", "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{
				remove("/spec/initContainers/0/resources/limits/" + esc(nv3g)), add("/spec/initContainers/0/resources/limits/"+esc(sl3g), "1"),
				remove("/spec/initContainers/0/resources/requests/" + esc(nv3g)), add("/spec/initContainers/0/resources/requests/"+esc(sl3g), "1"),
				setScheduler,
			},
		},
		{
			name: "second app container", settings: translate,
			pod: makePod().Container("a", builder.None).Container("b", limits(sl1g, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{
				add("/spec/containers/1/resources/requests", map[string]string{sl1g: "1"}),
				setScheduler,
			},
		},
		{
			name: "1000m is one slice, normalized", settings: translate,
			pod:  makePod().Container("app", both(sl1g, "1000m")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "translation off: nvidia.com is NVIDIA's", settings: noTranslate,
			pod: makePod().Container("app", both(nv1g, "1")).Obj(),
		},
		{
			name: "translation off: slicer.dev still mutated", settings: noTranslate,
			pod:  makePod().Container("app", limits(sl1g, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{add("/spec/containers/0/resources/requests", map[string]string{sl1g: "1"}), setScheduler},
		},
		{
			name: "mirror pod never mutated", settings: translate,
			pod: makePod().Annotation(corev1.MirrorPodAnnotationKey, "x").Container("app", both(nv1g, "1")).Obj(),
		},
		{
			name: "non-slicer annotations and labels are fine", settings: translate,
			pod:  makePod().Label("app", "x").Annotation("example.com/slicer.dev", "y").Container("app", both(sl1g, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "slicer.dev labels on a pod without MIG are not our business", settings: translate,
			pod: makePod().Label("slicer.dev/node", "n1").Container("app", both("cpu", "1")).Obj(),
		},
		{
			name: "empty scheduler name in settings means the default", settings: Settings{TranslateNVIDIA: true},
			pod:  makePod().Container("app", both(sl1g, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
	})
}

// testMutate checks each case's patch and that the mutated pod needs no further patch (I9).
func testMutate(t *testing.T, cases []mutateCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Mutate(tc.pod, tc.settings)
			if err != nil {
				t.Fatalf("Mutate: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			// I9: mutate(mutate(p)) == mutate(p).
			again, err := Mutate(applyPatch(t, tc.pod, got), tc.settings)
			if err != nil {
				t.Fatalf("Mutate of the mutated pod: %v", err)
			}
			if len(again) != 0 {
				t.Errorf("second patch not empty: %v", again)
			}
		})
	}
}

func TestMutateRejects(t *testing.T) {
	testRejects(t, []rejectCase{
		{
			name: "unknown profile", settings: translate,
			pod:  makePod().Container("app", both("nvidia.com/mig-3g.41gb", "1")).Obj(),
			want: []string{`container "app": 3g.41gb is not a MIG profile of any supported GPU; known: 1g.5gb, `, "7g.80gb"},
		},
		{
			name: "unknown slicer profile", settings: noTranslate,
			pod:  makePod().Container("app", limits("slicer.dev/mig-bogus", "1")).Obj(),
			want: []string{"bogus is not a MIG profile"},
		},
		{
			name: "zero", settings: translate,
			pod:  makePod().Container("app", both(sl1g, "0")).Obj(),
			want: []string{"slicer.dev/mig-1g.10gb is 0, but the number of MIG slices must be a positive integer"},
		},
		{
			name: "fraction", settings: translate,
			pod:  makePod().Container("app", both(nv1g, "500m")).Obj(),
			want: []string{"is 500m, but the number of MIG slices must be a positive integer"},
		},
		{
			name: "negative", settings: translate,
			pod:  makePod().Container("app", limits(sl1g, "-1")).Obj(),
			want: []string{"must be a positive integer"},
		},
		{
			name: "huge", settings: translate,
			pod:  makePod().Container("app", limits(sl1g, "1e30")).Obj(),
			want: []string{"is 1e30, but at most 16 MIG slices fit one pod"},
		},
		{
			name: "too many in one container", settings: translate,
			pod:  makePod().Container("app", limits(sl1g, "17")).Obj(),
			want: []string{"is 17, but at most 16 MIG slices fit one pod"},
		},
		{
			name: "just under one", settings: translate,
			pod:  makePod().Container("app", limits(sl1g, "999999999n")).Obj(),
			want: []string{"must be a positive integer"},
		},
		{
			name: "tiny fraction", settings: translate,
			pod:  makePod().Container("app", limits(sl1g, "1n")).Obj(),
			want: []string{"is 1n, but the number of MIG slices must be a positive integer"},
		},
		{
			name: "too many across containers", settings: translate,
			pod:  makePod().Container("a", limits(sl1g, "9")).Container("b", limits(nv3g, "8")).Obj(),
			want: []string{"the pod needs 17 MIG slices at once (8 × 3g.40gb, 9 × 1g.10gb); at most 16 fit one pod"},
		},
		{
			name: "a sidecar keeps its slices while the app runs", settings: translate,
			pod:  makePod().Sidecar("proxy", limits(nv1g, "9")).Container("app", limits(nv1g, "8")).Obj(),
			want: []string{"the pod needs 17 MIG slices at once (17 × 1g.10gb); at most 16 fit one pod"},
		},
		{
			name: "requests differ from limits", settings: translate,
			pod:  makePod().Container("app", limits(nv1g, "2").AndRequests(nv1g, "1")).Obj(),
			want: []string{`container "app": requests (1) and limits (2) of slicer.dev/mig-1g.10gb differ`},
		},
		{
			name: "nodeName pinned", settings: translate,
			pod:  makePod().Node("gpu-1").Container("app", both(nv1g, "1")).Obj(),
			want: []string{`spec.nodeName is set to "gpu-1"`, "remove spec.nodeName"},
		},
		{
			name: "foreign scheduler", settings: translate,
			pod:  makePod().Scheduler("volcano").Container("app", both(sl1g, "1")).Obj(),
			want: []string{`spec.schedulerName is "volcano", but only the Slicer scheduler ("slicer-scheduler") can place MIG slices`},
		},
		{
			name: "forged annotation", settings: translate,
			pod:  makePod().Annotation("slicer.dev/gpu-uuid", "GPU-1").Container("app", both(nv1g, "1")).Obj(),
			want: []string{`metadata.annotations["slicer.dev/gpu-uuid"]: keys under slicer.dev/ are reserved`},
		},
		{
			name: "slicer.dev/movable is the user's annotation, not a label", settings: translate,
			pod:  makePod().Label(slicerv1alpha1.AnnotationMovable, "false").Annotation(slicerv1alpha1.AnnotationMovable, "false").Container("app", both(nv1g, "1")).Obj(),
			want: []string{`metadata.labels["slicer.dev/movable"]: keys under slicer.dev/ are reserved`},
		},
		{
			name: "forged label, even the component label", settings: translate,
			pod:  makePod().Label("slicer.dev/component", "agent").Container("app", both(sl1g, "1")).Obj(),
			want: []string{`metadata.labels["slicer.dev/component"]`},
		},
		{
			name: "same profile under two names", settings: translate,
			pod:  makePod().Container("app", both(nv1g, "1", sl1g, "1")).Obj(),
			want: []string{`container "app" asks for MIG profile 1g.10gb under two names (nvidia.com/mig-1g.10gb and slicer.dev/mig-1g.10gb)`},
		},
		{
			name: "mixing NVIDIA's and Slicer's", settings: noTranslate,
			pod:  makePod().Container("a", both(nv1g, "1")).Container("b", both(sl1g, "1")).Obj(),
			want: []string{"asks for both nvidia.com/mig-* (served by NVIDIA's device plugin in this namespace) and slicer.dev/mig-*"},
		},
		{
			name: "ephemeral container", settings: translate,
			pod:  makePod().Container("app", builder.None).Ephemeral("debug", limits(sl1g, "1")).Obj(),
			want: []string{`ephemeral container "debug" cannot hold a MIG slice`},
		},
		{
			name: "several reasons at once", settings: translate,
			pod:  makePod().Node("n").Scheduler("other").Container("app", both(sl1g, "0")).Obj(),
			want: []string{"positive integer", "spec.nodeName", "spec.schedulerName"},
		},
	})
}

// testRejects checks that Mutate refuses each case with a message holding its substrings.
func testRejects(t *testing.T, cases []rejectCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Mutate(tc.pod, tc.settings)
			var rej *Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("Mutate = %v, %v; want a *Rejection", got, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(rej.Error(), w) {
					t.Errorf("message %q\ndoes not contain %q", rej.Error(), w)
				}
			}
		})
	}
}

// applyPatch applies a JSON patch to a pod the way the apiserver does.
func applyPatch(t *testing.T, pod *corev1.Pod, ops []jsonpatch.JsonPatchOperation) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) > 0 {
		raw, err := json.Marshal(ops)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := evanjsonpatch.DecodePatch(raw)
		if err != nil {
			t.Fatalf("decode patch: %v", err)
		}
		if doc, err = patch.Apply(doc); err != nil {
			t.Fatalf("apply patch %s: %v", raw, err)
		}
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(doc, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMutateAdmitsReusedInitSlices: the kubelet hands an init container's slices on to the app
// containers, so init 10 + app 10 of one profile is 10 slices, which the scheduler places.
func TestMutateAdmitsReusedInitSlices(t *testing.T) {
	pod := makePod().Init("fetch", limits(nv1g, "10")).Container("app", limits(nv1g, "10")).Obj()
	if _, err := Mutate(pod, translate); err != nil {
		t.Fatalf("Mutate rejected a pod that needs 10 slices: %v", err)
	}
}

// TestMutateAgreesWithScheduler: on random pods with init, sidecar and app containers, the
// webhook rejects exactly the pods whose request the scheduler refuses (podrequest.ForPod, which
// the scheduler's PreFilter calls), with the same message.
func TestMutateAgreesWithScheduler(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 2))
	profiles := []string{sl1g, sl3g}
	random := func() builder.Res {
		var kv []string
		for _, r := range profiles {
			if rng.IntN(2) == 0 {
				kv = append(kv, r, strconv.Itoa(1+rng.IntN(8)))
			}
		}
		return both(kv...)
	}
	rejected := 0
	for i := 0; i < 2000; i++ {
		w := makePod()
		for j := rng.IntN(3); j > 0; j-- {
			if rng.IntN(2) == 0 {
				w.Sidecar("sidecar"+strconv.Itoa(j), random())
			} else {
				w.Init("init"+strconv.Itoa(j), random())
			}
		}
		for j := 1 + rng.IntN(2); j > 0; j-- {
			w.Container("app"+strconv.Itoa(j), random())
		}
		pod := w.Obj()
		_, schedErr := podrequest.ForPod(&pod.Spec)
		_, err := Mutate(pod, translate)
		switch {
		case schedErr == nil && err != nil:
			t.Fatalf("webhook rejects a pod the scheduler places: %v\n%+v", err, pod.Spec)
		case schedErr != nil && err == nil:
			t.Fatalf("webhook admits a pod the scheduler refuses (%v)\n%+v", schedErr, pod.Spec)
		case schedErr != nil && err.Error() != schedErr.Error():
			t.Fatalf("messages differ:\nwebhook:   %v\nscheduler: %v", err, schedErr)
		case schedErr != nil:
			rejected++
		}
	}
	if rejected == 0 {
		t.Fatal("no random pod was over the limit; the test checks nothing")
	}
}
