package agent

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/podrequest"
	"github.com/slicer-operator/slicer/test/builder"
)

// ctr is a container asking for n slices of the test's profile.
type ctr struct {
	kind podrequest.Kind
	n    int
}

func app(n int) ctr     { return ctr{kind: podrequest.App, n: n} }
func initC(n int) ctr   { return ctr{kind: podrequest.Init, n: n} }
func sidecar(n int) ctr { return ctr{kind: podrequest.Sidecar, n: n} }

func indexed(a slicerv1alpha1.SliceAllocation, i int32) slicerv1alpha1.SliceAllocation {
	a.Spec.Index = i
	return a
}

func TestPreferred(t *testing.T) {
	const node, res = "n1", "slicer.dev/mig-1g.10gb"
	t0 := time.Unix(1000, 0)
	alloc := func(name, pod, profile, dev string, state slicerv1alpha1.AllocationState) slicerv1alpha1.SliceAllocation {
		return slicerv1alpha1.SliceAllocation{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: slicerv1alpha1.SliceAllocationSpec{PodName: pod, PodUID: "uid-" + pod, NodeName: node, GPUUUID: "GPU-" + dev,
				Profile: slicerv1alpha1.MIGProfile(profile)},
			Status: slicerv1alpha1.SliceAllocationStatus{State: state, MIGDeviceUUID: dev},
		}
	}
	ready := func(name, pod, dev string) slicerv1alpha1.SliceAllocation {
		return alloc(name, pod, "1g.10gb", dev, slicerv1alpha1.AllocationReady)
	}
	// pod is bound to node; its containers ask for 1g.10gb slices (default: one app
	// container with one).
	pod := func(name string, age time.Duration, cs ...ctr) *corev1.Pod {
		b := builder.Pod("ns", name).UID("uid-" + name).Node(node)
		if len(cs) == 0 {
			cs = []ctr{app(1)}
		}
		for i, c := range cs {
			r := builder.None
			if c.n > 0 {
				r = builder.Limits(res, strconv.Itoa(c.n))
			}
			add := map[podrequest.Kind]func(string, builder.Res) *builder.PodBuilder{
				podrequest.App: b.Container, podrequest.Init: b.Init, podrequest.Sidecar: b.Sidecar}[c.kind]
			add(fmt.Sprintf("c%d", i), r)
		}
		p := b.Obj()
		p.CreationTimestamp = metav1.NewTime(t0.Add(-age))
		return p
	}
	pods := func(ps ...*corev1.Pod) map[string]*corev1.Pod {
		m := map[string]*corev1.Pod{}
		for _, p := range ps {
			m[p.Namespace+"/"+p.Name] = p
		}
		return m
	}
	known := func(names ...string) map[string]map[string][]string {
		m := map[string]map[string][]string{}
		for _, n := range names {
			m["ns/"+n] = map[string][]string{}
		}
		return m
	}
	holding := func(m map[string]map[string][]string, name string, devs ...string) map[string]map[string][]string {
		m["ns/"+name] = map[string][]string{res: devs}
		return m
	}
	tests := []struct {
		name    string
		in      preferInput
		want    []string
		wantPod string
	}{
		{
			name: "one candidate gets its own device",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a")}, Pods: pods(pod("pa", time.Minute)),
				Kubelet: known("pa"), Available: []string{"MIG-a", "MIG-x"}, Size: 1},
			want: []string{"MIG-a"}, wantPod: "ns/pa",
		},
		{
			name: "two pods of one profile: the oldest first",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a"), ready("b", "pb", "MIG-b")},
				Pods: pods(pod("pa", time.Minute), pod("pb", time.Hour)), Kubelet: known("pa", "pb"), Available: []string{"MIG-a", "MIG-b"}, Size: 1},
			want: []string{"MIG-b"}, wantPod: "ns/pb",
		},
		{
			name: "same age: by namespace/name",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a"), ready("b", "pb", "MIG-b")},
				Pods: pods(pod("pb", time.Minute), pod("pa", time.Minute)), Kubelet: known("pa", "pb"), Available: []string{"MIG-a", "MIG-b"}, Size: 1},
			want: []string{"MIG-a"}, wantPod: "ns/pa",
		},
		{
			name: "a pod whose device is not available is no candidate",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a"), ready("b", "pb", "MIG-b")},
				Pods: pods(pod("pa", time.Minute), pod("pb", time.Hour)), Kubelet: known("pa", "pb"), Available: []string{"MIG-a"}, Size: 1},
			want: []string{"MIG-a"}, wantPod: "ns/pa",
		},
		{
			name: "an admitted pod is skipped even if its own device is still available (it got another one)",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a"), ready("b", "pb", "MIG-b")},
				Pods: pods(pod("pa", time.Minute), pod("pb", time.Hour)), Kubelet: holding(known("pa"), "pb", "MIG-z"),
				Available: []string{"MIG-a", "MIG-b"}, Size: 1},
			want: []string{"MIG-a"}, wantPod: "ns/pa",
		},
		{
			name: "a pod the kubelet does not list yet is no candidate, and its device is not handed out",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a"), ready("b", "pb", "MIG-b")},
				Pods: pods(pod("pa", time.Minute), pod("pb", time.Hour)), Kubelet: known("pa"), Available: []string{"MIG-a", "MIG-b"}, Size: 1},
			want: []string{"MIG-a"}, wantPod: "ns/pa",
		},
		{
			name: "no candidate: the kubelet chooses",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a")}, Pods: pods(pod("pa", time.Minute)),
				Kubelet: holding(known(), "pa", "MIG-a"), Available: []string{"MIG-x"}, Size: 1},
		},
		{
			name: "no kubelet list: the kubelet chooses",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a")}, Pods: pods(pod("pa", time.Minute)),
				Available: []string{"MIG-a"}, Size: 1},
		},
		{
			name: "pods missing, recreated with another UID, elsewhere, terminal or deleting are no candidates",
			in: func() preferInput {
				other := pod("pc", time.Hour)
				other.UID = "someone-else"
				elsewhere := pod("pd", time.Hour)
				elsewhere.Spec.NodeName = "n2"
				failedPod := pod("pe", time.Hour)
				failedPod.Status.Phase = corev1.PodFailed
				deleting := pod("pf", time.Hour)
				deleting.DeletionTimestamp = &metav1.Time{Time: t0}
				return preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a"), ready("b", "pb", "MIG-b"), ready("c", "pc", "MIG-c"),
					ready("d", "pd", "MIG-d"), ready("e", "pe", "MIG-e"), ready("f", "pf", "MIG-f")},
					Pods: pods(pod("pa", time.Minute), other, elsewhere, failedPod, deleting), Kubelet: known("pa", "pb", "pc", "pd", "pe", "pf"),
					Available: []string{"MIG-a", "MIG-b", "MIG-c", "MIG-d", "MIG-e", "MIG-f"}, Size: 1}
			}(),
			want: []string{"MIG-a"}, wantPod: "ns/pa",
		},
		{
			name: "allocations not Ready, of another profile, node or deleting give no device",
			in: func() preferInput {
				gone := ready("d", "pa", "MIG-d")
				gone.DeletionTimestamp = &metav1.Time{Time: t0}
				gone.Finalizers = []string{"x"}
				away := ready("e", "pa", "MIG-e")
				away.Spec.NodeName = "n2"
				return preferInput{Allocs: []slicerv1alpha1.SliceAllocation{
					alloc("b", "pa", "1g.10gb", "MIG-b", slicerv1alpha1.AllocationCreating), alloc("c", "pa", "2g.20gb", "MIG-c", slicerv1alpha1.AllocationReady), gone, away},
					Pods: pods(pod("pa", time.Minute)), Kubelet: known("pa"), Available: []string{"MIG-b", "MIG-c", "MIG-d", "MIG-e"}, Size: 1}
			}(),
		},
		{
			name: "mustInclude comes first and is never cut",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a")}, Pods: pods(pod("pa", time.Minute, initC(1), app(2))),
				Kubelet: known("pa"), Available: []string{"MIG-a", "MIG-m", "MIG-x"}, MustInclude: []string{"MIG-m"}, Size: 2},
			want: []string{"MIG-m", "MIG-a"}, wantPod: "ns/pa",
		},
		{
			name: "size 2: the pod's two devices, by allocation index",
			in: func() preferInput {
				a0, a1 := ready("a0", "pa", "MIG-a0"), ready("a1", "pa", "MIG-a1")
				a0.Spec.Index, a1.Spec.Index = 1, 0
				return preferInput{Allocs: []slicerv1alpha1.SliceAllocation{a0, a1, ready("b", "pb", "MIG-b")},
					Pods: pods(pod("pa", time.Hour, app(2)), pod("pb", time.Minute)), Kubelet: known("pa", "pb"),
					Available: []string{"MIG-a0", "MIG-a1", "MIG-b"}, Size: 2}
			}(),
			want: []string{"MIG-a1", "MIG-a0"}, wantPod: "ns/pa",
		},
		{
			name: "size larger than the pod's devices: filled first with devices no waiting pod was promised",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a"), ready("b", "pb", "MIG-b")},
				Pods: pods(pod("pa", time.Hour, app(2)), pod("pb", time.Minute, app(2))), Kubelet: known("pa", "pb"),
				Available: []string{"MIG-b", "MIG-a", "MIG-x"}, Size: 2},
			want: []string{"MIG-a", "MIG-x"}, wantPod: "ns/pa",
		},
		{
			name: "then the next candidates' devices, exactly size",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a"), ready("b", "pb", "MIG-b"), ready("c", "pc", "MIG-c")},
				Pods: pods(pod("pa", time.Hour, app(2)), pod("pb", time.Minute, app(2)), pod("pc", 2*time.Minute, app(2))), Kubelet: known("pa", "pb", "pc"),
				Available: []string{"MIG-a", "MIG-b", "MIG-c"}, Size: 2},
			want: []string{"MIG-a", "MIG-c"}, wantPod: "ns/pa",
		},
		{
			name: "a pod with two containers: after the first got a device, the second gets the other",
			in: func() preferInput {
				a0, a1 := ready("a0", "pa", "MIG-a0"), ready("a1", "pa", "MIG-a1")
				a1.Spec.Index = 1
				return preferInput{Allocs: []slicerv1alpha1.SliceAllocation{a0, a1, ready("b", "pb", "MIG-b")},
					Pods: pods(pod("pa", time.Hour, app(1), app(1)), pod("pb", time.Minute)), Kubelet: holding(known("pb"), "pa", "MIG-a0"),
					Available: []string{"MIG-a1", "MIG-b"}, Size: 1}
			}(),
			want: []string{"MIG-a1"}, wantPod: "ns/pa",
		},
		// Init and sidecar containers: the kubelet calls once per container that draws new
		// devices, with the devices it reuses from finished init containers in mustInclude.
		{
			name: "init container, then an app container reusing its device and drawing one more: the init container gets index 0",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a0", "pa", "MIG-a0"), indexed(ready("a1", "pa", "MIG-a1"), 1)},
				Pods: pods(pod("pa", time.Minute, initC(1), app(2))), Kubelet: known("pa"), Available: []string{"MIG-a1", "MIG-a0", "MIG-x"}, Size: 1},
			want: []string{"MIG-a0"}, wantPod: "ns/pa",
		},
		{
			name: "init container, then the app container: the reused device and the pod's other one",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a0", "pa", "MIG-a0"), indexed(ready("a1", "pa", "MIG-a1"), 1)},
				Pods: pods(pod("pa", time.Minute, initC(1), app(2))), Kubelet: known("pa"),
				Available: []string{"MIG-a0", "MIG-a1", "MIG-x"}, MustInclude: []string{"MIG-a0"}, Size: 2},
			want: []string{"MIG-a0", "MIG-a1"}, wantPod: "ns/pa",
		},
		{
			name: "the pod whose init container held the reused device is the one admitted, even when an older pod waits",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a0", "pa", "MIG-a0"), indexed(ready("a1", "pa", "MIG-a1"), 1),
				ready("b0", "pb", "MIG-b0"), indexed(ready("b1", "pb", "MIG-b1"), 1)},
				Pods:    pods(pod("pa", time.Minute, initC(1), app(2)), pod("pb", time.Hour, initC(1), app(2))),
				Kubelet: known("pa", "pb"), Available: []string{"MIG-a0", "MIG-a1", "MIG-b0", "MIG-b1"}, MustInclude: []string{"MIG-a0"}, Size: 2},
			want: []string{"MIG-a0", "MIG-a1"}, wantPod: "ns/pa",
		},
		{
			name: "sidecar keeps its device: the app container after it gets the pod's second one",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a0", "pa", "MIG-a0"), indexed(ready("a1", "pa", "MIG-a1"), 1)},
				Pods: pods(pod("pa", time.Minute, sidecar(1), app(1))), Kubelet: holding(known(), "pa", "MIG-a0"),
				Available: []string{"MIG-a1", "MIG-x"}, Size: 1},
			want: []string{"MIG-a1"}, wantPod: "ns/pa",
		},
		{
			name: "init and app containers sharing one device: admitted once the app container holds it",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a")},
				Pods: pods(pod("pa", time.Minute, initC(1), app(1))), Kubelet: holding(known(), "pa", "MIG-a"),
				Available: []string{"MIG-a", "MIG-x"}, Size: 1},
		},
		{
			name: "a pod with no container of the call's shape is not the one admitted",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a0", "pa", "MIG-a0"), indexed(ready("a1", "pa", "MIG-a1"), 1),
				ready("b", "pb", "MIG-b")},
				Pods: pods(pod("pa", time.Hour, app(2)), pod("pb", time.Minute)), Kubelet: known("pa", "pb"),
				Available: []string{"MIG-a0", "MIG-a1", "MIG-b"}, Size: 1},
			want: []string{"MIG-b"}, wantPod: "ns/pb",
		},
		{
			name: "a pod whose spec asks for none of the profile is no candidate",
			in: preferInput{Allocs: []slicerv1alpha1.SliceAllocation{ready("a", "pa", "MIG-a")},
				Pods: pods(pod("pa", time.Minute, app(0))), Kubelet: known("pa"),
				Available: []string{"MIG-a"}, Size: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Node, tc.in.Resource = node, res
			// The kubelet knows a slice by its slot's device ID: the table names it by the
			// allocation's MIG device, each on its own GPU.
			ids := map[string]string{}
			for i := range tc.in.Allocs {
				if d := tc.in.Allocs[i].Status.MIGDeviceUUID; d != "" {
					ids[d] = wantFromAllocation(&tc.in.Allocs[i]).desired().DeviceID()
				}
			}
			byID := func(l []string) []string {
				var out []string
				for _, d := range l {
					if id, ok := ids[d]; ok {
						d = id
					}
					out = append(out, d)
				}
				return out
			}
			tc.in.Available, tc.in.MustInclude, tc.want = byID(tc.in.Available), byID(tc.in.MustInclude), byID(tc.want)
			for _, per := range tc.in.Kubelet {
				for r, l := range per {
					per[r] = byID(l)
				}
			}
			got, gotPod := preferred(tc.in)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("preferred (-want +got):\n%s", d)
			}
			if gotPod != tc.wantPod {
				t.Errorf("pod %q, want %q", gotPod, tc.wantPod)
			}
		})
	}
}

// The kubelet admitting a pod that asks for whole GPUs is told the GPUs its allocations hold:
// the set the scheduler chose (the best connected), not any free one.
func TestPreferredWholeGPUs(t *testing.T) {
	const node = "n1"
	t0 := time.Unix(1000, 0)
	whole := func(name, pod, gpu string, index int32) slicerv1alpha1.SliceAllocation {
		return slicerv1alpha1.SliceAllocation{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       slicerv1alpha1.SliceAllocationSpec{PodName: pod, PodUID: "uid-" + pod, NodeName: node, GPUUUID: gpu, WholeGPU: true, Index: index},
			Status:     slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationReady},
		}
	}
	pod := func(name string, age time.Duration, gpus int) *corev1.Pod {
		p := builder.Pod("ns", name).UID("uid-"+name).Node(node).Container("c", builder.Limits(migapi.NVIDIAGPUResource, strconv.Itoa(gpus))).Obj()
		p.CreationTimestamp = metav1.NewTime(t0.Add(-age))
		return p
	}
	in := preferInput{
		Node: node, Resource: migapi.NVIDIAGPUResource,
		Allocs:  []slicerv1alpha1.SliceAllocation{whole("a0", "pa", "GPU-3", 0), whole("a1", "pa", "GPU-1", 1), whole("b0", "pb", "GPU-0", 0)},
		Pods:    map[string]*corev1.Pod{"ns/pa": pod("pa", time.Hour, 2), "ns/pb": pod("pb", time.Minute, 1)},
		Kubelet: map[string]map[string][]string{"ns/pa": {}, "ns/pb": {}}, Available: []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, Size: 2,
	}
	got, who := preferred(in)
	if diff := cmp.Diff([]string{"GPU-3", "GPU-1"}, got); diff != "" || who != "ns/pa" {
		t.Errorf("preferred = %v for %s; want pa's GPUs (-want +got):\n%s", got, who, diff)
	}
	// Once pa holds them, pb's container of one GPU gets pb's.
	in.Kubelet["ns/pa"] = map[string][]string{migapi.NVIDIAGPUResource: {"GPU-3", "GPU-1"}}
	in.Available, in.Size = []string{"GPU-0", "GPU-2"}, 1
	if got, who := preferred(in); !slices.Equal(got, []string{"GPU-0"}) || who != "ns/pb" {
		t.Errorf("preferred = %v for %s; want [GPU-0] for ns/pb", got, who)
	}
	// A MIG resource's question is not answered with whole GPUs.
	in.Resource = "slicer.dev/mig-1g.10gb"
	if got, _ := preferred(in); got != nil {
		t.Errorf("preferred for a MIG resource = %v; want nil", got)
	}
}
