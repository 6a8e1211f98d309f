package dra

import (
	"slices"
	"strings"
	"testing"

	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
)

// A node reboot destroys every MIG instance while the kubelet keeps its prepared claims in its
// checkpoint; it does not checkpoint that they are prepared, so before the pods' containers
// start again it calls NodePrepareResources for each (k8s.io/kubernetes
// pkg/kubelet/cm/dra/claiminfo.go, newClaimInfoFromState; manager.go, PrepareResources).
// Prepare recreates each device's instance at its placement and answers with CDI device IDs
// naming the new instances; a placement something else took fails the claim with the
// reason, and nothing is handed over (docs/design/invariants.md, I14). The stale spec of
// the run before is kept here (a real /var/run/cdi is a tmpfs, emptied by the reboot): the
// harder case.
func TestRebootPreparesAgain(t *testing.T) {
	h := newHarness(t)
	a := h.allocate("a", "gpu-0-3g-40gb-at-4", "gpu-1-1g-10gb-at-6")
	lost := h.allocate("lost", "gpu-1-1g-10gb-at-0")
	before := h.prepare(a)
	h.prepare(lost)
	old := h.instances()

	h.stop()
	if err := h.lib.Reboot(); err != nil {
		t.Fatal(err)
	}
	// Before the plugin is back, something outside Slicer takes lost's placement.
	foreign, err := h.lib.CreateInstance(1, "1g.20gb", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	h.lib.SetInUse(foreign, true)
	h.start()

	got := h.prepare(a)
	now := h.instances()
	for dev, ids := range got {
		if now[dev] == "" || now[dev] == old[dev] {
			t.Fatalf("device %s: instance %q after the reboot, %q before: not recreated at its placement", dev, now[dev], old[dev])
		}
		want := cdi.QualifiedName(cdi.ClaimDeviceName(string(a.UID), now[dev]))
		if !slices.Equal(ids, []string{want}) {
			t.Fatalf("device %s: CDI IDs %v, want [%s] (before the reboot: %v)", dev, ids, want, before[dev])
		}
	}
	if len(got) != 2 {
		t.Fatalf("prepared %v, want both devices", got)
	}
	recorded, ok, err := h.cdi.ReadClaim(string(a.UID))
	if err != nil || !ok {
		t.Fatalf("claim spec: %v, %v", ok, err)
	}
	for _, s := range recorded {
		if !slices.Contains([]string{now["gpu-0-3g-40gb-at-4"], now["gpu-1-1g-10gb-at-6"]}, s.MIGUUID) {
			t.Fatalf("the claim's spec names %s, not one of the new instances %v", s.MIGUUID, now)
		}
	}
	if err := cdi.Validate(h.cdi.ClaimPath(string(a.UID))); err != nil {
		t.Fatal(err)
	}

	creates := h.lib.Calls(emulated.OpCreateGPUInstance)
	r := h.prepareResult(lost)
	if r.Error == "" || !strings.Contains(r.Error, "taken by") || len(r.Devices) != 0 {
		t.Fatalf("lost's placement is taken, yet prepare answered %+v", r)
	}
	if h.lib.Calls(emulated.OpCreateGPUInstance) != creates {
		t.Fatal("prepare created an instance for a claim whose placement is taken")
	}
	if _, ok := h.instances()["gpu-1-1g-10gb-at-0"]; ok {
		t.Fatal("an instance at lost's placement")
	}
	held := false
	for _, in := range h.lib.Instances() {
		held = held || in.MIGUUID == foreign
	}
	if !held {
		t.Fatal("the foreign instance was destroyed while in use")
	}
	h.unprepare(a)
	if inst := h.instances(); len(inst) != 1 {
		t.Fatalf("after a's unprepare: %v, want only the foreign instance", inst)
	}
}
