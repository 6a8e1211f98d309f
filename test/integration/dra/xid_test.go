package dra

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/dra"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// taints reads the pool's devices from the apiserver: each device's unhealthy taint value
// ("" when it has none). It fails when a taint has another key or effect.
func (h *harness) taints(t *testing.T) map[string]string {
	t.Helper()
	l, err := h.cs.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range l.Items {
		if s.Spec.Driver != migdra.DriverName || s.Spec.Pool.Name != nodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			out[d.Name] = ""
			for _, tn := range d.Taints {
				if tn.Key != dra.TaintUnhealthy || tn.Effect != resourceapi.DeviceTaintEffectNoSchedule {
					t.Fatalf("device %s has taint %+v", d.Name, tn)
				}
				out[d.Name] = tn.Value
			}
		}
	}
	return out
}

// onGPU keeps the devices of taints on GPU index i.
func onGPU(taints map[string]string, i int) map[string]string {
	out := map[string]string{}
	for name, v := range taints {
		if ref, err := migdra.ParseDeviceName(name); err == nil && ref.GPU == i {
			out[name] = v
		}
	}
	return out
}

// Issue 41 item 6 on the DRA frontend: an XID that breaks a GPU taints every device of it in
// the node's ResourceSlices (NoSchedule: the stock scheduler allocates none of them, the pod
// running there is not evicted), the NodeAccelerator and the pod's Event say so, Prepare
// refuses a claim there; an XID in one MIG instance taints that instance's device alone;
// an application's XID nothing. The GPU's reset and the instance's end bring the devices back.
func TestXIDTaintsDevices(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	waitFor(t, "the health watcher registered both GPUs", func() (bool, error) { return h.lib.Calls(emulated.OpRegisterEvents) >= 2, nil })
	podA := h.runningPod("default", "pod-a")
	a := h.allocateFor(podA, "a", "gpu-0-3g-40gb-at-4")
	h.prepare(a)
	podB := h.runningPod("default", "pod-b")
	b := h.allocateFor(podB, "b", "gpu-1-1g-10gb-at-0")
	h.prepare(b)
	waitFor(t, "the pool published", func() (bool, error) { return len(h.taints(t)) > 0, nil })

	sync := func() {
		t.Helper()
		if err := h.plugin.drv.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	count := func(want map[string]int) func() (bool, error) {
		return func() (bool, error) {
			sync()
			got := map[string]int{}
			for _, v := range h.taints(t) {
				got[v]++
			}
			for k, n := range want {
				if got[k] != n {
					return false, nil
				}
			}
			return true, nil
		}
	}
	all := len(h.taints(t))
	perGPU := len(onGPU(h.taints(t), 0))

	if err := h.lib.RaiseXID(emulated.XID{GPU: 0, GPUInstance: -1, Code: 43}); err != nil {
		t.Fatal(err)
	}
	// GPU 0 falls off the bus and the driver asks for a reset.
	if err := h.lib.RaiseXID(emulated.XID{GPU: 0, GPUInstance: -1, Code: 79, Action: nvml.RecoveryGPUReset, Unavailable: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "GPU 0's devices tainted", count(map[string]int{"gpu": perGPU, "": all - perGPU}))
	for name, v := range onGPU(h.taints(t), 1) {
		if v != "" {
			t.Fatalf("GPU 1's device %s is tainted %q", name, v)
		}
	}
	na, err := h.nodeAccelerator()
	if err != nil {
		t.Fatal(err)
	}
	if g := na.Status.GPUs[0]; g.Health != slicerv1alpha1.GPUUnhealthy || !strings.Contains(g.HealthMessage, "reset") {
		t.Errorf("NodeAccelerator GPU 0: %s %q", g.Health, g.HealthMessage)
	}
	waitFor(t, "a GPUUnhealthy Event on pod-a", func() (bool, error) {
		l, err := h.cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range l.Items {
			if e.Regarding.Kind == "Pod" && e.Regarding.Name == podA.Name && e.Reason == slicerv1alpha1.ReasonGPUUnhealthy && e.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
	late := h.allocate("late", "gpu-0-1g-10gb-at-0")
	if r := h.prepareResult(late); !strings.Contains(r.Error, "unhealthy") {
		t.Fatalf("a claim was prepared on the broken GPU: %+v", r)
	}

	// A contained memory error in b's instance: that device alone.
	gi := -1
	for _, in := range h.lib.Instances() {
		if in.GPU == 1 {
			gi = in.GPUInstance
		}
	}
	if err := h.lib.RaiseXID(emulated.XID{GPU: 1, GPUInstance: gi, Code: 94}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's device tainted", count(map[string]int{"gpu": perGPU, "instance": 1, "": all - perGPU - 1}))
	if v := h.taints(t)["gpu-1-1g-10gb-at-0"]; v != "instance" {
		t.Fatalf("b's device is tainted %q", v)
	}

	// The reset brings GPU 0 back; b's instance goes with its claim.
	if err := h.lib.Recover(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "GPU 0 untainted", count(map[string]int{"gpu": 0, "instance": 1}))
	h.prepare(late)
	h.unprepare(b)
	waitFor(t, "no taint left", count(map[string]int{"gpu": 0, "instance": 0, "": all}))
	for _, c := range []*resourceapi.ResourceClaim{a, late} {
		h.unprepare(c)
		h.deleteClaim(c)
	}
	h.deleteClaim(b)
}
