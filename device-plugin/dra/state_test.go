package dra

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

func h100(t *testing.T) mig.Model {
	t.Helper()
	m, err := mig.ParseModel("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func slot(profile string, start, size int) mig.Slot {
	return mig.Slot{GPU: "GPU-0", Profile: profile, Placement: mig.Placement{Start: start, Size: size}}
}

func TestDecide(t *testing.T) {
	complete := engine.Slice{Slot: slot("1g.10gb", 3, 1), GI: 1, CI: 0, MIGUUID: "MIG-1"}
	bare := engine.Slice{Slot: slot("3g.40gb", 4, 4), GI: 2, CI: -1}
	other := engine.Slice{Slot: mig.Slot{GPU: "GPU-1", Profile: "7g.80gb", Placement: mig.Placement{Start: 0, Size: 8}}, GI: 0, CI: 0, MIGUUID: "MIG-x"}
	have := []engine.Slice{other, complete, bare}
	for _, tc := range []struct {
		name string
		slot mig.Slot
		want step
	}{
		{"the instance at the placement is reused", slot("1g.10gb", 3, 1), stepReuse},
		{"a bare GPU instance at the placement is finished", slot("3g.40gb", 4, 4), stepFinish},
		{"a free placement is created (another GPU's instance does not count)", slot("1g.10gb", 0, 1), stepCreate},
		{"an overlapping instance of another profile blocks", slot("2g.20gb", 2, 2), stepBlocked},
		{"the same placement with another profile blocks", slot("1g.20gb", 3, 2), stepBlocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := decide(have, tc.slot); got != tc.want {
				t.Fatalf("decide = %d, want %d", got, tc.want)
			}
		})
	}
}

func claim(uid, pool string, devices ...string) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-" + uid, UID: k8stypes.UID("uid-" + uid)}}
	var res []resourceapi.DeviceRequestAllocationResult
	for _, d := range devices {
		res = append(res, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: migdra.DriverName, Pool: pool, Device: d})
	}
	res = append(res, resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: "other.dev", Pool: pool, Device: "eth0"})
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: res}}
	return c
}

func TestClaimDevicesAndExplained(t *testing.T) {
	a := claim("a", "node-1", "gpu-0-1g-10gb-at-3", "gpu-1-7g-80gb-at-0", "gpu-2")
	b := claim("b", "node-2", "gpu-0-1g-10gb-at-3")
	unallocated := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "u"}}
	devs, err := claimDevices(&a, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []allocated{
		{Request: "gpu", Device: "gpu-0-1g-10gb-at-3", Ref: migdra.DeviceRef{GPU: 0, ProfileToken: "1g-10gb", Start: 3}},
		{Request: "gpu", Device: "gpu-1-7g-80gb-at-0", GPU: 1, Ref: migdra.DeviceRef{GPU: 1, ProfileToken: "7g-80gb", Start: 0}},
		{Request: "gpu", Device: "gpu-2", GPU: 2, Whole: true},
	}
	if diff := cmp.Diff(want, devs); diff != "" {
		t.Fatalf("claimDevices (-want +got):\n%s", diff)
	}
	if _, err := claimDevices(&unallocated, "node-1"); err == nil {
		t.Fatal("an unallocated claim gave devices")
	}
	bad := claim("x", "node-1", "gpu-0-1g-10gb")
	if _, err := claimDevices(&bad, "node-1"); err == nil {
		t.Fatal("a device name with no placement was read")
	}
	held := explained([]*resourceapi.ResourceClaim{&a, &b, &unallocated}, "node-1")
	wantHeld := map[string][]string{"gpu-0-1g-10gb-at-3": {"uid-a"}, "gpu-1-7g-80gb-at-0": {"uid-a"}, "gpu-2": {"uid-a"}}
	if diff := cmp.Diff(wantHeld, held); diff != "" {
		t.Fatalf("explained (-want +got):\n%s", diff)
	}
}

func TestOrphansAreInstancesNoClaimHolds(t *testing.T) {
	m := h100(t)
	obs := &engine.Observation{GPUs: []*engine.GPU{{Index: 0, UUID: "GPU-0", Model: m, Healthy: true, Slices: []engine.Slice{
		{Slot: slot("1g.10gb", 3, 1), CI: 0, MIGUUID: "MIG-1"},
		{Slot: slot("3g.40gb", 4, 4), CI: -1},
	}}}}
	got := orphans(obs, map[string][]string{"gpu-0-1g-10gb-at-3": {"uid-a"}}, nil)
	if !cmp.Equal(got, []string{"gpu-0-3g-40gb-at-4"}) {
		t.Fatalf("orphans = %v", got)
	}
}

// Along a sequence of arrivals and departures, the device the stock allocator takes from the
// published order is always the preferred order's first pick for the current occupancy, while
// changes that move no first pick are not written.
func TestRepublishKeepsThePreferredFirstPick(t *testing.T) {
	m := h100(t)
	gpus := func(st mig.GPUState) []migdra.GPU {
		return []migdra.GPU{{Index: 0, UUID: "GPU-0", State: st, MIGEnabled: true, Healthy: true}}
	}
	st := mig.EmptyGPU(m)
	write, cur := republish(nil, gpus(st), unhealthy{})
	if !write {
		t.Fatal("nothing published yet, and no write")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var held []mig.Instance
	writes, skips := 0, 0
	for step := range 400 {
		if len(held) > 0 && rng.IntN(3) == 0 {
			held = slices.Delete(held, 0, 1)
		} else {
			ps := m.Profiles()
			p := ps[rng.IntN(len(ps))]
			if d, ok := mig.FirstFitting(node(gpus(st)), cur.devices, p.Name); ok {
				held = append(held, mig.Instance{Profile: p.Name, Placement: d.Placement})
			}
		}
		var err error
		if st, err = mig.NewGPUState(m, held); err != nil {
			t.Fatal(err)
		}
		w, next := republish(&cur, gpus(st), unhealthy{})
		if w {
			cur, writes = next, writes+1
		} else {
			skips++
		}
		n := node(gpus(st))
		for _, p := range m.Profiles() {
			a, okA := mig.FirstFitting(n, cur.devices, p.Name)
			b, okB := mig.FirstFitting(n, mig.Devices(n, mig.PreferredOrder), p.Name)
			if okA != okB || a.Placement != b.Placement {
				t.Fatalf("step %d, %s: published pick %v (%v), preferred %v (%v)", step, p.Name, a.Placement, okA, b.Placement, okB)
			}
		}
	}
	if writes == 0 || skips == 0 {
		t.Fatalf("%d writes, %d skipped: the rule neither writes nor skips", writes, skips)
	}
	t.Logf("%d writes for %d changes", writes, writes+skips)
	sick := gpus(st)
	sick[0].Healthy = false
	if w, _ := republish(&cur, sick, unhealthy{}); !w {
		t.Fatal("a GPU went unhealthy, and no write")
	}
}

func TestPoolGPUsCountAllocatedDevicesNotYetRealized(t *testing.T) {
	m := h100(t)
	obs := &engine.Observation{GPUs: []*engine.GPU{{Index: 0, UUID: "GPU-0", Model: m, Healthy: true, MIGMode: 1,
		Slices: []engine.Slice{{Slot: slot("1g.10gb", 3, 1), CI: 0, MIGUUID: "MIG-1"}}}}}
	gpus := poolGPUs(obs, map[string][]string{"gpu-0-3g-40gb-at-4": {"uid-b"}, "gpu-1-1g-10gb-at-0": {"uid-c"}}, nil)
	want, err := mig.NewGPUState(m, []mig.Instance{{Profile: "1g.10gb", Placement: mig.Placement{Start: 3, Size: 1}}, {Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 || gpus[0].State != want {
		t.Fatalf("occupancy %+v, want the instance and the allocation of GPU 0", gpus)
	}
}

// An unhealthy MIG GPU stays in the pool with every device tainted; an instance an XID broke
// taints its own device; a change of either is a republish.
func TestUnhealthyDevicesAreTainted(t *testing.T) {
	m := h100(t)
	broken := engine.Slice{Slot: slot("1g.10gb", 3, 1), GI: 1, CI: 0, MIGUUID: "MIG-1", Unhealthy: "XID 94 in GPU instance 1 (NVML event)"}
	broken.GPU = "GPU-1"
	obs := &engine.Observation{GPUs: []*engine.GPU{
		{Index: 0, UUID: "GPU-0", Model: m, Healthy: false, MIGMode: 1},
		{Index: 1, UUID: "GPU-1", Model: m, Healthy: true, MIGMode: 1, Slices: []engine.Slice{broken}},
	}}
	gpus, sick := poolGPUs(obs, nil, nil), unhealthyOf(obs)
	pool, err := migdra.Pool(gpus, mig.PreferredOrder)
	if err != nil {
		t.Fatal(err)
	}
	taint(&pool, sick)
	byValue := map[string]int{}
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			ref, _ := migdra.ParseDeviceName(d.Name)
			v := ""
			for _, tn := range d.Taints {
				v = tn.Value
			}
			switch {
			case ref.GPU == 0 && v != "gpu":
				t.Errorf("device %s of the unhealthy GPU is not tainted", d.Name)
			case ref.GPU == 1 && d.Name == "gpu-1-1g-10gb-at-3" && v != "instance":
				t.Errorf("the broken instance's device is tainted %q", v)
			case ref.GPU == 1 && d.Name != "gpu-1-1g-10gb-at-3" && v != "":
				t.Errorf("device %s of the healthy GPU is tainted %q", d.Name, v)
			}
			byValue[v]++
		}
	}
	if byValue["gpu"] == 0 || byValue["instance"] != 1 {
		t.Fatalf("taints %v", byValue)
	}
	_, cur := republish(nil, gpus, sick)
	if w, _ := republish(&cur, gpus, unhealthy{GPUs: map[int]bool{}, Devices: sick.Devices}); !w {
		t.Fatal("the GPU recovered, and no write")
	}
	if w, _ := republish(&cur, gpus, sick); w {
		t.Fatal("nothing changed, and a write")
	}
}
