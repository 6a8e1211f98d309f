package podrequest

import (
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

const gpu = string(WholeGPUResource)

func TestWholeGPUs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		init, apps []corev1.Container
		want       int
		wantErr    string
	}{
		{name: "no GPUs", apps: []corev1.Container{ctr("app", "cpu", 1)}},
		{name: "no containers"},
		{name: "one app container", apps: []corev1.Container{ctr("app", gpu, 2)}, want: 2},
		{name: "two app containers add up", apps: []corev1.Container{ctr("a", gpu, 2), ctr("b", gpu, 1)}, want: 3},
		{name: "init then app share the GPUs", init: []corev1.Container{ctr("init", gpu, 4)},
			apps: []corev1.Container{ctr("app", gpu, 4)}, want: 4},
		{name: "init larger than apps", init: []corev1.Container{ctr("init", gpu, 4)},
			apps: []corev1.Container{ctr("a", gpu, 1), ctr("b", gpu, 1)}, want: 4},
		{name: "sidecar keeps its GPU", init: []corev1.Container{sidecar(ctr("sc", gpu, 1))},
			apps: []corev1.Container{ctr("app", gpu, 1)}, want: 2},
		{name: "init after a sidecar cannot reuse the sidecar's GPUs", init: []corev1.Container{sidecar(ctr("sc", gpu, 2)), ctr("init", gpu, 1)},
			apps: []corev1.Container{ctr("app", gpu, 1)}, want: 3},
		{name: "other resources beside the GPUs", apps: []corev1.Container{ctr("app", gpu, 1, "cpu", 4, "example.com/nic", 1)}, want: 1},
		{name: "16 fit", init: []corev1.Container{ctr("init", gpu, 16)}, apps: []corev1.Container{ctr("app", gpu, 16)}, want: 16},
		{name: "17 at once do not fit", init: []corev1.Container{sidecar(ctr("sc", gpu, 9))}, apps: []corev1.Container{ctr("app", gpu, 8)},
			wantErr: "the pod needs 17 whole GPUs at once; at most 16 whole GPUs fit one pod (a pod's GPUs are on one node, and no node has more)"},
		{name: "one container over the limit", apps: []corev1.Container{ctr("app", gpu, 17)},
			wantErr: `container "app": nvidia.com/gpu is 17, but at most 16 whole GPUs fit one pod (a pod's GPUs are on one node, and no node has more)`},
		{name: "zero", apps: []corev1.Container{ctr("app", gpu, 0)},
			wantErr: `container "app": nvidia.com/gpu is 0, but the number of whole GPUs must be a positive integer`},
		{name: "zero in an init container", init: []corev1.Container{ctr("init", gpu, 0)}, apps: []corev1.Container{ctr("app", gpu, 1)},
			wantErr: `container "init": nvidia.com/gpu is 0, but the number of whole GPUs must be a positive integer`},
		{name: "a fraction", apps: []corev1.Container{quantity("app", gpu, "500m")},
			wantErr: `container "app": nvidia.com/gpu is 500m, but the number of whole GPUs must be a positive integer`},
		{name: "just under one", apps: []corev1.Container{quantity("app", gpu, "999999999n")},
			wantErr: `container "app": nvidia.com/gpu is 999999999n, but the number of whole GPUs must be a positive integer`},
		{name: "negative", apps: []corev1.Container{quantity("app", gpu, "-1")},
			wantErr: `container "app": nvidia.com/gpu is -1, but the number of whole GPUs must be a positive integer`},
		{name: "huge", apps: []corev1.Container{quantity("app", gpu, "1e30")},
			wantErr: `container "app": nvidia.com/gpu is 1e30, but at most 16 whole GPUs fit one pod`},
		{name: "a GPU and a Slicer slice in one container", apps: []corev1.Container{ctr("app", gpu, 1, r1g, 1)},
			wantErr: `container "app" asks for both nvidia.com/gpu and a MIG slice (slicer.dev/mig-1g.10gb); a container gets either whole GPUs or MIG slices: ask for one of them, and run the other in a separate pod`},
		{name: "a GPU and an NVIDIA slice in one container", apps: []corev1.Container{ctr("app", gpu, 1, "nvidia.com/mig-3g.40gb", 1)},
			wantErr: `container "app" asks for both nvidia.com/gpu and a MIG slice (nvidia.com/mig-3g.40gb)`},
		{name: "zero GPUs and a slice in one container", apps: []corev1.Container{ctr("app", gpu, 0, r1g, 1)},
			wantErr: `container "app" asks for both nvidia.com/gpu and a MIG slice`},
		{name: "GPUs in one container, slices in another", apps: []corev1.Container{ctr("train", gpu, 2), ctr("infer", r3g, 1, r1g, 1)},
			wantErr: `the pod asks for whole GPUs (nvidia.com/gpu in container "train") and MIG slices (slicer.dev/mig-1g.10gb in container "infer"); one pod holding both is not supported yet: run the slices and the whole GPUs in separate pods`},
		{name: "a slice in an init container, GPUs in the app", init: []corev1.Container{ctr("warm", "nvidia.com/mig-1g.10gb", 1)}, apps: []corev1.Container{ctr("app", gpu, 1)},
			wantErr: `MIG slices (nvidia.com/mig-1g.10gb in container "warm"); one pod holding both is not supported yet`},
		{name: "slices without GPUs are ForPod's", apps: []corev1.Container{ctr("app", r1g, 2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &corev1.PodSpec{InitContainers: tc.init, Containers: tc.apps}
			got, err := WholeGPUs(spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("WholeGPUs = %d, %v; want error %q", got, err, tc.wantErr)
				}
				if !MentionsWholeGPUs(spec) {
					t.Error("MentionsWholeGPUs is false for a pod WholeGPUs refuses")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("WholeGPUs = %d, want %d", got, tc.want)
			}
			if MentionsWholeGPUs(spec) != (tc.want > 0) {
				t.Errorf("MentionsWholeGPUs disagrees with WholeGPUs")
			}
		})
	}
}

func TestWholeGPUsReadsRequestWithoutLimit(t *testing.T) {
	c := corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{WholeGPUResource: resource.MustParse("2")}}}
	spec := &corev1.PodSpec{Containers: []corev1.Container{c}}
	if got, err := WholeGPUs(spec); err != nil || got != 2 {
		t.Fatalf("WholeGPUs = %d, %v; want 2", got, err)
	}
	if !MentionsWholeGPUs(spec) {
		t.Error("MentionsWholeGPUs misses a request")
	}
	c.Resources.Limits = corev1.ResourceList{WholeGPUResource: resource.MustParse("3")}
	if got, err := WholeGPUs(&corev1.PodSpec{Containers: []corev1.Container{c}}); err != nil || got != 3 {
		t.Fatalf("WholeGPUs = %d, %v; want the limit, 3", got, err)
	}
}

// TestWholeGPUsAgreesWithPodRequests is TestForPodAgreesWithPodRequests for whole GPUs: on
// random pods the GPUs WholeGPUs counts are what the scheduler and the kubelet's admission
// count (k8s.io/component-helpers resource.PodRequests), and WholeGPUs refuses exactly the
// pods that count more than MaxRequestGPUs.
func TestWholeGPUsAgreesWithPodRequests(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 40))
	refused := 0
	for iter := 0; iter < 5000; iter++ {
		pod := randomPod(rng, []string{gpu}, 6)
		got, err := WholeGPUs(&pod.Spec)
		want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[WholeGPUResource]
		switch {
		case want.Value() > MaxRequestGPUs:
			if err == nil {
				t.Fatalf("pod %+v: WholeGPUs admits %d GPUs, PodRequests counts %d", pod.Spec, got, want.Value())
			}
			refused++
		case err != nil:
			t.Fatalf("pod %+v: WholeGPUs refused (%v) a pod PodRequests counts %d GPUs for", pod.Spec, err, want.Value())
		case int64(got) != want.Value():
			t.Fatalf("pod %+v: WholeGPUs counts %d, PodRequests %d", pod.Spec, got, want.Value())
		}
	}
	if refused == 0 {
		t.Fatal("no random pod was over the limit; the test checks nothing")
	}
}

// quantity is a container asking for res as written in a pod (limits only).
func quantity(name, res, q string) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse(q)}}}
}

// WholeGPUNeed gives each container's share as ForPod does for slices: what the agent's
// preferred allocation matches the kubelet's request against.
func TestWholeGPUNeedContainers(t *testing.T) {
	spec := &corev1.PodSpec{InitContainers: []corev1.Container{ctr("init", gpu, 2)}, Containers: []corev1.Container{ctr("a", gpu, 1), ctr("b", gpu, 2)}}
	need, err := WholeGPUNeed(spec)
	if err != nil {
		t.Fatal(err)
	}
	if need.Count(gpu) != 3 {
		t.Errorf("Count = %d, want 3", need.Count(gpu))
	}
	var got []string
	for _, c := range need.Containers {
		u := c.Uses[gpu]
		got = append(got, c.Name+":"+c.Kind.String()+":"+string(rune('0'+u.Total))+"/"+string(rune('0'+u.New)))
	}
	want := "init:init container:2/2 a:container:1/0 b:container:2/1"
	if strings.Join(got, " ") != want {
		t.Errorf("containers = %v, want %s", got, want)
	}
	if n, err := WholeGPUNeed(&corev1.PodSpec{Containers: []corev1.Container{ctr("app", "cpu", 1)}}); err != nil || n.Count(gpu) != 0 || len(n.Containers) != 0 {
		t.Errorf("no GPUs: %+v, %v; want a zero Need", n, err)
	}
}
