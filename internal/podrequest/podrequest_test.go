package podrequest

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/slicer-operator/slicer/internal/mig"
)

const (
	r1g  = "slicer.dev/mig-1g.10gb"
	r3g  = "slicer.dev/mig-3g.40gb"
	r7g  = "slicer.dev/mig-7g.80gb"
	r1me = "slicer.dev/mig-1g.10gb.me"
)

// ctr is a container asking for the resources given as name, count pairs (limits only).
func ctr(name string, kv ...any) corev1.Container {
	c := corev1.Container{Name: name}
	if len(kv) > 0 {
		c.Resources.Limits = corev1.ResourceList{}
	}
	for i := 0; i < len(kv); i += 2 {
		c.Resources.Limits[corev1.ResourceName(kv[i].(string))] = *resource.NewQuantity(int64(kv[i+1].(int)), resource.DecimalSI)
	}
	return c
}

func sidecar(c corev1.Container) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func items(kv ...any) []mig.RequestItem {
	var out []mig.RequestItem
	for i := 0; i < len(kv); i += 2 {
		out = append(out, mig.RequestItem{Profile: kv[i].(string), Count: kv[i+1].(int)})
	}
	return out
}

func TestForPod(t *testing.T) {
	for _, tc := range []struct {
		name       string
		init, apps []corev1.Container
		ephemeral  bool
		want       []mig.RequestItem
		wantErr    string
	}{
		{name: "no slices", apps: []corev1.Container{ctr("app")}},
		{name: "one app container", apps: []corev1.Container{ctr("app", r3g, 1)}, want: items("3g.40gb", 1)},
		{name: "two app containers add up", apps: []corev1.Container{ctr("a", r1g, 2), ctr("b", r1g, 1)}, want: items("1g.10gb", 3)},
		{name: "app containers of several profiles", apps: []corev1.Container{ctr("a", r1g, 1, r3g, 1), ctr("b", r1me, 1)},
			want: items("1g.10gb", 1, "1g.10gb+me", 1, "3g.40gb", 1)},
		// Defect 1 of issue 15: the app container reuses the init container's device.
		{name: "init then app of one profile share the device", init: []corev1.Container{ctr("init", r1g, 1)},
			apps: []corev1.Container{ctr("app", r1g, 1)}, want: items("1g.10gb", 1)},
		// Defect 2 of issue 15: 10 + 10 is 10 devices, well within one pod.
		{name: "init 10 then app 10 is 10", init: []corev1.Container{ctr("init", r1g, 10)},
			apps: []corev1.Container{ctr("app", r1g, 10)}, want: items("1g.10gb", 10)},
		{name: "init larger than apps", init: []corev1.Container{ctr("init", r1g, 4)},
			apps: []corev1.Container{ctr("a", r1g, 1), ctr("b", r1g, 1)}, want: items("1g.10gb", 4)},
		{name: "apps larger than init", init: []corev1.Container{ctr("init", r1g, 1)},
			apps: []corev1.Container{ctr("a", r1g, 2), ctr("b", r1g, 1)}, want: items("1g.10gb", 3)},
		{name: "init containers reuse each other's devices", init: []corev1.Container{ctr("i1", r1g, 2), ctr("i2", r1g, 3)},
			apps: []corev1.Container{ctr("app", r1g, 1)}, want: items("1g.10gb", 3)},
		{name: "init of another profile is not reused", init: []corev1.Container{ctr("init", r3g, 1)},
			apps: []corev1.Container{ctr("app", r1g, 1)}, want: items("1g.10gb", 1, "3g.40gb", 1)},
		{name: "sidecar keeps its device", init: []corev1.Container{sidecar(ctr("sc", r1g, 1))},
			apps: []corev1.Container{ctr("app", r1g, 1)}, want: items("1g.10gb", 2)},
		{name: "sidecar reuses an earlier init container's device", init: []corev1.Container{ctr("init", r1g, 1), sidecar(ctr("sc", r1g, 1))},
			apps: []corev1.Container{ctr("app", r1g, 1)}, want: items("1g.10gb", 2)},
		{name: "init after a sidecar cannot reuse the sidecar's device", init: []corev1.Container{sidecar(ctr("sc", r1g, 2)), ctr("init", r1g, 1)},
			apps: []corev1.Container{ctr("app", r1g, 1)}, want: items("1g.10gb", 3)},
		{name: "sidecar and apps draw the pool down", init: []corev1.Container{ctr("init", r1g, 3), sidecar(ctr("sc", r1g, 1))},
			apps: []corev1.Container{ctr("a", r1g, 1), ctr("b", r1g, 2)}, want: items("1g.10gb", 4)},
		{name: "mixed profiles, init sidecar app", init: []corev1.Container{ctr("init", r3g, 1, r1g, 2), sidecar(ctr("sc", r1g, 1))},
			apps: []corev1.Container{ctr("app", r3g, 1, r7g, 1)}, want: items("1g.10gb", 2, "3g.40gb", 1, "7g.80gb", 1)},
		{name: "ephemeral containers get none", apps: []corev1.Container{ctr("app", r1g, 1)}, ephemeral: true, want: items("1g.10gb", 1)},
		{name: "16 across init and app fit", init: []corev1.Container{ctr("init", r1g, 16)},
			apps: []corev1.Container{ctr("app", r1g, 16)}, want: items("1g.10gb", 16)},
		{name: "17 at once do not fit", init: []corev1.Container{sidecar(ctr("sc", r1g, 9))},
			apps: []corev1.Container{ctr("app", r1g, 8)}, wantErr: "the pod needs 17 MIG slices at once (17 × 1g.10gb); at most 16 fit one pod"},
		{name: "one container over the limit", apps: []corev1.Container{ctr("app", r1g, 17)},
			wantErr: `container "app": slicer.dev/mig-1g.10gb is 17, but at most 16 MIG slices fit one pod`},
		{name: "zero", apps: []corev1.Container{ctr("app", r1g, 0)},
			wantErr: `container "app": slicer.dev/mig-1g.10gb is 0, but the number of MIG slices must be a positive integer`},
		{name: "just under one", apps: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{r1g: resource.MustParse("999999999n")}}}},
			wantErr: `container "app": slicer.dev/mig-1g.10gb is 999999999n, but the number of MIG slices must be a positive integer`},
		{name: "unknown profile", apps: []corev1.Container{ctr("app", "slicer.dev/mig-5g.1tb", 1)},
			wantErr: `container "app" asks for slicer.dev/mig-5g.1tb, which is not a MIG profile`},
		{name: "other resources are ignored", apps: []corev1.Container{ctr("app", "nvidia.com/gpu", 1, "cpu", 2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &corev1.PodSpec{InitContainers: tc.init, Containers: tc.apps}
			if tc.ephemeral {
				spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}}
			}
			got, err := ForPod(spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Items); diff != "" {
				t.Errorf("items (-want +got):\n%s", diff)
			}
			if Mentions(spec) != (tc.want != nil) {
				t.Errorf("Mentions disagrees with ForPod")
			}
		})
	}
}

func TestForPodContainers(t *testing.T) {
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{ctr("init", r1g, 2), sidecar(ctr("sc", r1g, 1)), ctr("plain")},
		Containers:     []corev1.Container{ctr("app", r1g, 2, r3g, 1)},
	}
	got, err := ForPod(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []ContainerNeed{
		{Name: "init", Kind: Init, Uses: map[string]Use{"1g.10gb": {Total: 2, New: 2}}},
		{Name: "sc", Kind: Sidecar, Uses: map[string]Use{"1g.10gb": {Total: 1, New: 0}}},
		{Name: "app", Kind: App, Uses: map[string]Use{"1g.10gb": {Total: 2, New: 1}, "3g.40gb": {Total: 1, New: 1}}},
	}
	if diff := cmp.Diff(want, got.Containers); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	if got.Describe() != "1 × 3g.40gb, 3 × 1g.10gb" {
		t.Errorf("Describe = %q", got.Describe())
	}
}

func TestForPodReadsRequestWithoutLimit(t *testing.T) {
	c := corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{r1g: resource.MustParse("2")}}}
	got, err := ForPod(&corev1.PodSpec{Containers: []corev1.Container{c}})
	if err != nil || got.Count("1g.10gb") != 2 {
		t.Fatalf("ForPod = %+v, %v; want 2 × 1g.10gb", got, err)
	}
}

// TestForPodAgreesWithPodRequests checks, on random pods, that the kubelet's distinct devices
// equal what the scheduler and the kubelet's admission count for the pod
// (k8s.io/component-helpers resource.PodRequests): a node that has room by one count has room
// by the other.
func TestForPodAgreesWithPodRequests(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 15))
	profiles := []string{r1g, r3g}
	for iter := 0; iter < 5000; iter++ {
		pod := randomPod(rng, profiles, 3)
		got, err := ForPod(&pod.Spec)
		want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
		for _, r := range profiles {
			q := want[corev1.ResourceName(r)]
			prof, _ := mig.ProfileNameFromResource(r)
			if err != nil {
				continue // over the pod limit: only the sum matters, checked below
			}
			if int64(got.Count(prof)) != q.Value() {
				t.Fatalf("pod %+v: ForPod counts %d of %s, PodRequests %d", pod.Spec, got.Count(prof), r, q.Value())
			}
		}
		if err != nil {
			total := int64(0)
			for _, r := range profiles {
				q := want[corev1.ResourceName(r)]
				total += q.Value()
			}
			if total <= mig.MaxRequestSlices {
				t.Fatalf("pod %+v: ForPod refused (%v) a pod PodRequests counts %d slices for", pod.Spec, err, total)
			}
		}
	}
}

// randomPod is a pod of up to 3 init containers (regular or sidecar) and up to 2 app
// containers, each asking for each of resources with probability 2/3, 1 to most of it, with
// requests = limits as the API server defaults them.
func randomPod(rng *rand.Rand, resources []string, most int) *corev1.Pod {
	random := func(name string) corev1.Container {
		var kv []any
		for _, r := range resources {
			if rng.IntN(3) > 0 {
				kv = append(kv, r, 1+rng.IntN(most))
			}
		}
		c := ctr(name, kv...)
		c.Resources.Requests = c.Resources.Limits
		return c
	}
	pod := &corev1.Pod{}
	for i := rng.IntN(4); i > 0; i-- {
		c := random("init" + string(rune('a'+i)))
		if rng.IntN(2) == 0 {
			c = sidecar(c)
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	}
	for i := rng.IntN(3); i > 0; i-- {
		pod.Spec.Containers = append(pod.Spec.Containers, random("app"+string(rune('a'+i))))
	}
	return pod
}

// The NVIDIA spelling is read only by ForNVIDIAResources/MentionsNVIDIA, with the same rule;
// ForPod ignores it (the webhook rewrites it in device-plugin mode).
func TestForNVIDIAResources(t *testing.T) {
	const n1g, n3g = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{ctr("init", n1g, 2), sidecar(ctr("side", n3g, 1))},
		Containers:     []corev1.Container{ctr("app", n1g, 1, r7g, 1)},
	}
	need, err := ForNVIDIAResources(spec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(items("1g.10gb", 2, "3g.40gb", 1), need.Items); diff != "" {
		t.Errorf("ForNVIDIAResources (-want +got):\n%s", diff)
	}
	if need, err := ForPod(spec); err != nil || cmp.Diff(items("7g.80gb", 1), need.Items) != "" {
		t.Errorf("ForPod = %v, %v; want only the slicer.dev resource", need.Items, err)
	}
	if !MentionsNVIDIA(spec) || MentionsNVIDIA(&corev1.PodSpec{Containers: []corev1.Container{ctr("app", r1g, 1)}}) {
		t.Error("MentionsNVIDIA does not follow the nvidia.com/mig- prefix")
	}
	if _, err := ForNVIDIAResources(&corev1.PodSpec{Containers: []corev1.Container{ctr("app", "nvidia.com/mig-9g.1gb", 1)}}); err == nil {
		t.Error("an unknown NVIDIA profile is not refused")
	}
}
