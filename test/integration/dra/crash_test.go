package dra

import (
	"context"
	"testing"

	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
)

// crashRestart replaces a plugin killed at a crash point with a new process: a new emulated
// NVML on the state file the killed one left.
func (h *harness) crashRestart() {
	h.t.Helper()
	h.stop()
	lib, err := emulated.New(h.nvmlOpts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.lib = lib
	h.start()
}

// unprepareErr is the kubelet's Unprepare of one claim, returning the claim's error.
func (h *harness) unprepareErr(uid, ns, name string) string {
	h.t.Helper()
	resp, err := h.plugin.kubelet.NodeUnprepareResources(context.Background(), &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{{Namespace: ns, Name: name, Uid: uid}}})
	if err != nil {
		return err.Error()
	}
	if r := resp.Claims[uid]; r != nil {
		return r.Error
	}
	return "no result"
}

// The DRA frontend's crash points (issue 41, item 5): the plugin killed after the GPU
// instance is created and before its compute instance, between the instance and the claim's
// CDI spec, and, in Unprepare, after the compute instance is destroyed and before the GPU
// instance (the spec is removed last, by a file operation no NVML crash point reaches; a run
// that dies just before it leaves a spec with nothing at its placements, which the next
// Unprepare removes: "nothing found is success"). The kubelet calls again after the
// restart (it retries a Prepare or Unprepare that did not answer success); the plugin
// converges: Prepare finishes or adopts the instance at the placement (never a second one,
// never another claim's), Unprepare destroys what is left, and nothing is left once the
// claim is unprepared (I2, I5).
func TestCrashPointsConverge(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name, device, op string
		unprepare        bool
		// bare: the instance at the crash has no compute instance.
		bare bool
	}{
		{name: "after-gi", device: "gpu-0-3g-40gb-at-4", op: emulated.OpCreateGPUInstance, bare: true},
		{name: "before-spec", device: "gpu-1-2g-20gb-at-2", op: emulated.OpCreateComputeInstance},
		{name: "after-ci-destroy", device: "gpu-0-1g-10gb-at-6", op: emulated.OpDestroyComputeInst, unprepare: true, bare: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := h.allocate(tc.name, tc.device)
			defer h.deleteClaim(c)
			if tc.unprepare {
				h.prepare(c)
			}
			h.lib.CrashAfter(tc.op, 1, func() { h.kill.Dead.Store(true) })
			if tc.unprepare {
				if e := h.unprepareErr(string(c.UID), c.Namespace, c.Name); e == "" {
					t.Fatalf("unprepare through the crash point answered success")
				}
			} else if r := h.prepareResult(c); r.Error == "" {
				t.Fatalf("prepare through the crash point answered success: %+v", r)
			}
			if !h.lib.Crashed() {
				t.Fatalf("the crash point at %s was not reached", tc.op)
			}
			at := h.lib.Instances()
			_, spec, err := h.cdi.ReadClaim(string(c.UID))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case len(at) != 1 || (at[0].ComputeInstance == -1) != tc.bare:
				t.Fatalf("instances at the crash: %+v", at)
			case !tc.unprepare && spec:
				t.Fatalf("a claim spec exists at the crash: the spec must come last")
			case tc.unprepare && !spec:
				t.Fatalf("the claim's spec is gone at the crash")
			}

			h.crashRestart()
			if tc.unprepare {
				h.unprepare(c)
				if got := h.lib.Instances(); len(got) != 0 {
					t.Fatalf("left after the unprepare that followed the crash: %+v", got)
				}
				if _, spec, _ := h.cdi.ReadClaim(string(c.UID)); spec {
					t.Fatal("the claim's spec is left")
				}
				return
			}
			ids := h.prepare(c)
			got := h.lib.Instances()
			if len(got) != 1 || got[0].GPUInstance != at[0].GPUInstance || got[0].MIGUUID == "" {
				t.Fatalf("after the restart: %+v, at the crash %+v: want the same GPU instance, complete", got, at)
			}
			if h.lib.Calls(emulated.OpCreateGPUInstance) != 0 {
				t.Fatal("the restarted plugin created a second GPU instance")
			}
			recorded, ok, err := h.cdi.ReadClaim(string(c.UID))
			if err != nil || !ok || len(recorded) != 1 || recorded[0].MIGUUID != got[0].MIGUUID || len(ids[tc.device]) != 1 {
				t.Fatalf("claim spec %+v, %v, %v; CDI IDs %v", recorded, ok, err, ids)
			}
			h.unprepare(c)
			if got := h.lib.Instances(); len(got) != 0 {
				t.Fatalf("left after unprepare: %+v", got)
			}
		})
	}
}
