package webhook

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/podrequest"
	"github.com/slicer-operator/slicer/test/builder"
)

const gpu = string(podrequest.WholeGPUResource)

// Whole GPUs (docs/design/pod-requests.md, "Whole GPUs"): routed to the Slicer scheduler where
// Slicer serves NVIDIA's names, never rewritten, and left alone where NVIDIA's plugin does.
func TestMutateWholeGPUs(t *testing.T) {
	testMutate(t, []mutateCase{
		{
			name: "whole GPUs are routed, not rewritten", settings: translate,
			pod:  makePod().Container("app", both(gpu, "1", "cpu", "2")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "a request without a limit is not completed", settings: translate,
			pod:  makePod().Container("app", requests(gpu, "2")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "init and app containers", settings: translate,
			pod:  makePod().Init("fetch", limits(gpu, "8")).Container("a", limits(gpu, "4")).Container("b", limits(gpu, "4")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "16 at once", settings: translate,
			pod:  makePod().Sidecar("proxy", limits(gpu, "8")).Container("app", limits(gpu, "8")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "default-scheduler is replaced", settings: translate,
			pod:  makePod().Scheduler("default-scheduler").Container("app", both(gpu, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "already routed: empty patch", settings: translate,
			pod: makePod().Scheduler("slicer-scheduler").Container("app", both(gpu, "4")).Obj(),
		},
		{
			name: "a GPU container beside a plain one", settings: translate,
			pod:  makePod().Container("log", both("cpu", "1")).Container("train", both(gpu, "2")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "slicer.dev/movable is the user's to set", settings: translate,
			pod:  makePod().Annotation(slicerv1alpha1.AnnotationMovable, "false").Container("app", both(gpu, "1")).Obj(),
			want: []jsonpatch.JsonPatchOperation{setScheduler},
		},
		{
			name: "another resource named like it is not a whole GPU", settings: translate,
			pod: makePod().Container("app", both("nvidia.com/gpu.shared", "1")).Obj(),
		},
		{
			name: "mirror pod never routed", settings: translate,
			pod: makePod().Annotation(corev1.MirrorPodAnnotationKey, "x").Container("app", both(gpu, "0")).Obj(),
		},
		// Translation off: nvidia.com/gpu is NVIDIA's, the pod is left alone entirely.
		{name: "translation off: whole GPUs are NVIDIA's", settings: noTranslate, pod: makePod().Container("app", both(gpu, "1")).Obj()},
		{name: "translation off: zero is not ours to refuse", settings: noTranslate, pod: makePod().Container("app", both(gpu, "0")).Obj()},
		{name: "translation off: 17 is not ours to refuse", settings: noTranslate, pod: makePod().Container("app", limits(gpu, "17")).Obj()},
		{
			name: "translation off: pinned, another scheduler, slicer.dev keys", settings: noTranslate,
			pod: makePod().Node("n1").Scheduler("volcano").Label("slicer.dev/node", "n1").Container("app", both(gpu, "2")).Obj(),
		},
		{
			name: "translation off: a GPU beside NVIDIA's slices", settings: noTranslate,
			pod: makePod().Container("app", both(gpu, "1", nv1g, "1")).Obj(),
		},
	})
}

func TestMutateRejectsWholeGPUs(t *testing.T) {
	testRejects(t, []rejectCase{
		{
			name: "zero", settings: translate,
			pod:  makePod().Container("app", both(gpu, "0")).Obj(),
			want: []string{`container "app": nvidia.com/gpu is 0, but the number of whole GPUs must be a positive integer`},
		},
		{
			name: "zero in an init container beside a valid app", settings: translate,
			pod:  makePod().Init("warm", limits(gpu, "0")).Container("app", limits(gpu, "1")).Obj(),
			want: []string{`container "warm": nvidia.com/gpu is 0`},
		},
		{
			name: "fraction", settings: translate,
			pod:  makePod().Container("app", both(gpu, "500m")).Obj(),
			want: []string{"nvidia.com/gpu is 500m, but the number of whole GPUs must be a positive integer"},
		},
		{
			name: "negative", settings: translate,
			pod:  makePod().Container("app", limits(gpu, "-2")).Obj(),
			want: []string{"nvidia.com/gpu is -2, but the number of whole GPUs must be a positive integer"},
		},
		{
			name: "more than any node has", settings: translate,
			pod:  makePod().Container("app", limits(gpu, "17")).Obj(),
			want: []string{`container "app": nvidia.com/gpu is 17, but at most 16 whole GPUs fit one pod (a pod's GPUs are on one node, and no node has more)`},
		},
		{
			name: "more than any node has, across containers", settings: translate,
			pod:  makePod().Sidecar("proxy", limits(gpu, "9")).Container("app", limits(gpu, "8")).Obj(),
			want: []string{"the pod needs 17 whole GPUs at once; at most 16 whole GPUs fit one pod"},
		},
		{
			name: "a GPU and an NVIDIA slice in one container", settings: translate,
			pod:  makePod().Container("app", both(gpu, "1", nv1g, "1")).Obj(),
			want: []string{`container "app" asks for both nvidia.com/gpu and a MIG slice (nvidia.com/mig-1g.10gb); a container gets either whole GPUs or MIG slices`},
		},
		{
			name: "a GPU and a Slicer slice in one container", settings: translate,
			pod:  makePod().Container("app", both(gpu, "2", sl3g, "1")).Obj(),
			want: []string{`container "app" asks for both nvidia.com/gpu and a MIG slice (slicer.dev/mig-3g.40gb)`},
		},
		{
			name: "translation off: a slice pod that also asks for a GPU", settings: noTranslate,
			pod:  makePod().Container("app", both(gpu, "1", sl1g, "1")).Obj(),
			want: []string{`container "app" asks for both nvidia.com/gpu and a MIG slice (slicer.dev/mig-1g.10gb)`},
		},
		{
			name: "GPUs in one container, slices in another", settings: translate,
			pod:  makePod().Container("train", both(gpu, "2")).Container("infer", both(nv3g, "1")).Obj(),
			want: []string{`the pod asks for whole GPUs (nvidia.com/gpu in container "train") and MIG slices (nvidia.com/mig-3g.40gb in container "infer"); one pod holding both is not supported yet: run the slices and the whole GPUs in separate pods`},
		},
		{
			name: "translation off: GPUs beside Slicer's slices", settings: noTranslate,
			pod:  makePod().Init("warm", both(sl1g, "1")).Container("train", both(gpu, "1")).Obj(),
			want: []string{`MIG slices (slicer.dev/mig-1g.10gb in container "warm"); one pod holding both is not supported yet`},
		},
		{
			name: "nodeName pinned", settings: translate,
			pod:  makePod().Node("gpu-1").Container("app", both(gpu, "1")).Obj(),
			want: []string{`spec.nodeName is set to "gpu-1", but a pod that asks for whole GPUs must be placed by the Slicer scheduler, which chooses the GPUs; remove spec.nodeName`},
		},
		{
			name: "foreign scheduler", settings: translate,
			pod:  makePod().Scheduler("volcano").Container("app", both(gpu, "1")).Obj(),
			want: []string{`spec.schedulerName is "volcano", but only the Slicer scheduler ("slicer-scheduler") can place whole GPUs; remove spec.schedulerName or set it to "slicer-scheduler"`},
		},
		{
			name: "forged annotation", settings: translate,
			pod:  makePod().Annotation("slicer.dev/gpu-uuid", "GPU-1").Container("app", both(gpu, "1")).Obj(),
			want: []string{`metadata.annotations["slicer.dev/gpu-uuid"]: keys under slicer.dev/ are reserved for Slicer's own allocation data and cannot be set on a pod that asks for whole GPUs`},
		},
		{
			name: "bad count and a foreign scheduler at once", settings: translate,
			pod:  makePod().Scheduler("volcano").Container("app", both(gpu, "0")).Obj(),
			want: []string{"nvidia.com/gpu is 0", `spec.schedulerName is "volcano"`},
		},
	})
}

// TestMutateAgreesWithSchedulerOnWholeGPUs: on random pods asking for whole GPUs, slices or
// both, the webhook refuses exactly the pods the scheduler's PreFilter would (WholeGPUs, then
// ForPod), with the same message, and routes every other one without rewriting its GPUs.
func TestMutateAgreesWithSchedulerOnWholeGPUs(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 1))
	random := func(resources []string) builder.Res {
		var kv []string
		for _, r := range resources {
			if rng.IntN(3) > 0 {
				kv = append(kv, r, strconv.Itoa(1+rng.IntN(6)))
			}
		}
		return both(kv...)
	}
	var rejected, mixed, routed int
	for i := 0; i < 2000; i++ {
		resources := [][]string{{gpu}, {sl1g}, {gpu, sl1g}}[rng.IntN(3)]
		w := makePod()
		for j := rng.IntN(3); j > 0; j-- {
			if rng.IntN(2) == 0 {
				w.Sidecar("sidecar"+strconv.Itoa(j), random(resources))
			} else {
				w.Init("init"+strconv.Itoa(j), random(resources))
			}
		}
		for j := 1 + rng.IntN(2); j > 0; j-- {
			w.Container("app"+strconv.Itoa(j), random(resources))
		}
		pod := w.Obj()
		gpus, schedErr := podrequest.WholeGPUs(&pod.Spec)
		if schedErr == nil {
			_, schedErr = podrequest.ForPod(&pod.Spec)
		}
		ops, err := Mutate(pod, translate)
		switch {
		case schedErr == nil && err != nil:
			t.Fatalf("webhook rejects a pod the scheduler places: %v\n%+v", err, pod.Spec)
		case schedErr != nil && err == nil:
			t.Fatalf("webhook admits a pod the scheduler refuses (%v)\n%+v", schedErr, pod.Spec)
		case schedErr != nil && err.Error() != schedErr.Error():
			t.Fatalf("messages differ:\nwebhook:   %v\nscheduler: %v", err, schedErr)
		case schedErr != nil:
			rejected++
			if podrequest.MentionsWholeGPUs(&pod.Spec) && podrequest.Mentions(&pod.Spec) {
				mixed++
			}
		case gpus > 0:
			routed++
			if diff := cmp.Diff([]jsonpatch.JsonPatchOperation{setScheduler}, ops); diff != "" {
				t.Fatalf("a whole-GPU pod's patch (-want +got):\n%s", diff)
			}
		}
	}
	if rejected-mixed == 0 || mixed == 0 || routed == 0 {
		t.Fatalf("%d refused for too many GPUs or slices, %d for mixing, %d routed: the test misses a kind", rejected-mixed, mixed, routed)
	}
}
