package agent

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/test/builder"
)

const testGPU = "GPU-0"

func h100(slices ...engine.Slice) *engine.Observation {
	return &engine.Observation{GPUs: []*engine.GPU{{UUID: testGPU, Model: mig.H100_80GB, MIGSupported: true, MIGMode: nvml.MIGEnabled, Healthy: true, Slices: slices}}}
}

// allocation is a live 1g.10gb-or-other allocation of pod p-<name> on testGPU.
func allocation(name, profile string, start, size int32, mods ...func(*slicerv1alpha1.SliceAllocation)) *slicerv1alpha1.SliceAllocation {
	a := builder.Allocation("ns", name).Finalizer(slicerv1alpha1.AllocationFinalizer).
		Pod("p-"+name, "uid-"+name).Node("n1").GPU(testGPU).Profile(profile, start, size).Obj()
	for _, m := range mods {
		m(a)
	}
	return a
}

func deleting(a *slicerv1alpha1.SliceAllocation) {
	a.DeletionTimestamp = &metav1.Time{Time: time.Unix(900, 0)}
}

func onGPU(gpu string) func(*slicerv1alpha1.SliceAllocation) {
	return func(a *slicerv1alpha1.SliceAllocation) { a.Spec.GPUUUID = gpu }
}

func holding(dev string) func(*slicerv1alpha1.SliceAllocation) {
	return func(a *slicerv1alpha1.SliceAllocation) { a.Status.MIGDeviceUUID = dev }
}

func inState(s slicerv1alpha1.AllocationState) func(*slicerv1alpha1.SliceAllocation) {
	return func(a *slicerv1alpha1.SliceAllocation) { a.Status.State = s }
}

func allocMap(as ...*slicerv1alpha1.SliceAllocation) map[types.NamespacedName]*slicerv1alpha1.SliceAllocation {
	m := map[types.NamespacedName]*slicerv1alpha1.SliceAllocation{}
	for _, a := range as {
		m[types.NamespacedName{Namespace: a.Namespace, Name: a.Name}] = a
	}
	return m
}

func jobString(j *job) string {
	who := "orphan"
	if j.forAllocation() {
		who = j.key.Name
	}
	return fmt.Sprintf("%s %s %s", [...]string{"destroy", "finish", "create"}[j.kind], who, j.slot)
}

func statusStrings(m map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus) []string {
	var out []string
	for k, s := range m {
		out = append(out, fmt.Sprintf("%s=%s/%s", k.Name, s.State, s.Reason))
	}
	sort.Strings(out)
	return out
}

func keyNames[V any](m map[types.NamespacedName]V) []string {
	var out []string
	for k := range m {
		out = append(out, k.Name)
	}
	sort.Strings(out)
	return out
}

func TestDecide(t *testing.T) {
	now := time.Unix(1000, 0)
	s0 := engine.Slice{Slot: slot(testGPU, "1g.10gb", 0, 1), GI: 1, CI: 0, MIGUUID: "MIG-0"}
	bare := engine.Slice{Slot: slot(testGPU, "1g.10gb", 1, 1), GI: 2, CI: -1}
	s4 := engine.Slice{Slot: slot(testGPU, "1g.10gb", 4, 1), GI: 4, CI: 0, MIGUUID: "MIG-4"}
	s5 := engine.Slice{Slot: slot(testGPU, "1g.10gb", 5, 1), GI: 5, CI: 0, MIGUUID: "MIG-5"}
	type decided struct{ Statuses, Bound, Jobs, Released, Collect, Notes []string }
	tests := []struct {
		name string
		w    world
		want decided
	}{
		{
			name: "a new allocation is created at its slot, with no status written before the work",
			w:    world{Obs: h100(), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1))},
			want: decided{Jobs: []string{"create a GPU-0 1g.10gb@0"}},
		},
		{
			// An agent that crashed after creating the instances, before its one status write:
			// the allocation's status is empty and its slice already exists.
			name: "a crash before the Ready write: the slice at an allocation's slot is adopted, not created again",
			w:    world{Obs: h100(s0), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1))},
			want: decided{Bound: []string{"a=MIG-0"}},
		},
		{
			// v0.1.0 agents wrote Creating before the work; the new agent reads it as no status.
			name: "upgrade: an allocation left Creating by a v0.1.0 agent is finished, adopted or created",
			w: world{Obs: h100(s0, bare), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1, inState(slicerv1alpha1.AllocationCreating)),
				allocation("b", "1g.10gb", 1, 1, inState(slicerv1alpha1.AllocationCreating)),
				allocation("c", "1g.10gb", 2, 1, inState(slicerv1alpha1.AllocationCreating)))},
			want: decided{Bound: []string{"a=MIG-0"}, Jobs: []string{"finish b GPU-0 1g.10gb@1", "create c GPU-0 1g.10gb@2"}},
		},
		{
			name: "allocations the node can never realize fail and get no job",
			w: world{Obs: h100(), Allocs: allocMap(allocation("gone", "1g.10gb", 0, 1, onGPU("GPU-9")),
				allocation("odd", "2g.20gb", 1, 2), allocation("huge", "9g.99gb", 0, 8))},
			want: decided{Statuses: []string{"gone=Failed/GPUNotFound", "huge=Failed/InvalidPlacement", "odd=Failed/InvalidPlacement"}},
		},
		{
			name: "an existing slice is adopted and a bare GPU instance finished",
			w:    world{Obs: h100(s0, bare), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1), allocation("b", "1g.10gb", 1, 1))},
			want: decided{Bound: []string{"a=MIG-0"}, Jobs: []string{"finish b GPU-0 1g.10gb@1"}},
		},
		{
			name: "a deleting allocation's slice is destroyed; one that holds none is released at once",
			w: world{Obs: h100(s0), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1, deleting, holding("MIG-0")),
				allocation("b", "1g.10gb", 2, 1, deleting))},
			want: decided{Jobs: []string{"destroy a GPU-0 1g.10gb@0"}, Released: []string{"b"}},
		},
		{
			name: "a slice the kubelet still assigns to a pod is not destroyed",
			w: world{Obs: h100(s0), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1, deleting, holding("MIG-0"))),
				Usage: map[string]string{"MIG-0": "ns/p-a"}},
			want: decided{},
		},
		{
			name: "an unused orphan past the grace period is destroyed; a younger one, or one in use, is kept",
			w: world{Obs: h100(s0, s4, s5), Now: now, Grace: time.Minute, Usage: map[string]string{"MIG-5": "ns/someone"},
				OrphanSince: map[string]time.Time{"MIG-0": now.Add(-time.Hour), "MIG-4": now.Add(-time.Second), "MIG-5": now.Add(-time.Hour)}},
			want: decided{Jobs: []string{"destroy orphan GPU-0 1g.10gb@0"}},
		},
		{
			name: "another MIG manager owns the node: nothing is created, allocations wait, releases without a slice still go",
			w: world{Conflict: migapi.Foreign{Reason: slicerv1alpha1.ReasonForeignMIGManager, Message: "owned"}, Obs: h100(bare), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1), allocation("b", "1g.10gb", 1, 1),
				allocation("c", "1g.10gb", 2, 1, deleting))},
			want: decided{Statuses: []string{"a=Pending/ForeignMIGManager", "b=Pending/ForeignMIGManager"}, Released: []string{"c"}},
		},
		{
			name: "an allocation whose pod is gone is collected and gets no slice; a deleting one is released as usual",
			w: world{Obs: h100(s0), Allocs: allocMap(allocation("a", "1g.10gb", 2, 1), allocation("b", "1g.10gb", 0, 1, holding("MIG-0")),
				allocation("c", "1g.10gb", 3, 1, deleting)),
				PodGone: map[types.NamespacedName]podEnd{key("a"): {Why: "pod ns/p-a does not exist"}, key("b"): {Why: "pod ns/p-b is another pod"}, key("c"): {Why: "gone too"}}},
			want: decided{Collect: []string{"a", "b"}, Released: []string{"c"}},
		},
		{
			// Issue 26: a Succeeded or Failed pod uses no device; its slice goes to the next pod.
			name: "an allocation whose pod finished is collected (its Event comes from collect); its neighbour's slice is kept",
			w: world{Obs: h100(s0, s4), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1, holding("MIG-0")), allocation("b", "1g.10gb", 4, 1, holding("MIG-4"))),
				PodGone: map[types.NamespacedName]podEnd{key("a"): {Finished: true, Why: "pod ns/p-a (UID uid-a) finished (phase Succeeded)"}}},
			want: decided{Bound: []string{"b=MIG-4"}, Collect: []string{"a"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.w)
			got := decided{Statuses: statusStrings(d.Statuses), Released: keyNames(d.Released)}
			for k, s := range d.Plan.Bound {
				got.Bound = append(got.Bound, k.Name+"="+s.MIGUUID)
			}
			sort.Strings(got.Bound)
			for _, k := range d.Collect {
				got.Collect = append(got.Collect, k.Name)
			}
			for _, n := range d.Notes {
				got.Notes = append(got.Notes, n.Key.Name+" "+n.Reason)
			}
			for _, j := range d.Jobs {
				got.Jobs = append(got.Jobs, jobString(j))
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSettle(t *testing.T) {
	now := time.Unix(1000, 0)
	s0 := engine.Slice{Slot: slot(testGPU, "1g.10gb", 0, 1), GI: 1, CI: 0, MIGUUID: "MIG-0"}
	created := engine.Slice{Slot: slot(testGPU, "1g.10gb", 2, 1), GI: 3, CI: 0, MIGUUID: "MIG-new"}
	type settled struct {
		Statuses, Released, Bound, Notes, Forget []string
		Retry, Mutated                           bool
		Reclaimed                                map[string]int
		Conflicts                                int
	}
	tests := []struct {
		name    string
		w       world
		results func(j *job) opResult
		want    settled
	}{
		{
			name:    "a created slice is bound",
			w:       world{Obs: h100(), Allocs: allocMap(allocation("a", "1g.10gb", 2, 1))},
			results: func(*job) opResult { return opResult{Slice: created} },
			want:    settled{Bound: []string{"a=MIG-new"}, Mutated: true},
		},
		{
			name: "a placement NVML refuses fails; a slice in the way waits as Creating, with a warning",
			w:    world{Obs: h100(), Allocs: allocMap(allocation("a", "1g.10gb", 2, 1), allocation("b", "1g.10gb", 3, 1))},
			results: func(j *job) opResult {
				if j.key.Name == "a" {
					return opResult{Err: nvml.NewError("create", nvml.ErrorInvalidArgument, "")}
				}
				return opResult{Err: nvml.NewError("create", nvml.ErrorInUse, "")}
			},
			want: settled{Statuses: []string{"a=Failed/InvalidPlacement", "b=Creating/InUse"}, Notes: []string{"a NVMLError", "b InUse"},
				Retry: true, Mutated: true},
		},
		{
			name: "a profile the driver does not have fails",
			w:    world{Obs: h100(), Allocs: allocMap(allocation("a", "1g.10gb", 2, 1))},
			results: func(*job) opResult {
				return opResult{Err: nvml.NewError("CreateGpuInstanceWithPlacement", nvml.ErrorNotSupported, "driver 470 has no MIG profile")}
			},
			want: settled{Statuses: []string{"a=Failed/ProfileNotSupported"}, Notes: []string{"a NVMLError"}, Retry: true, Mutated: true},
		},
		{
			name: "destroyed: the deleting allocation is released, the orphan forgotten, each with its event and count",
			w: world{Obs: h100(s0, created), Now: now, Grace: time.Minute, OrphanSince: map[string]time.Time{"MIG-new": now.Add(-time.Hour)},
				Allocs: allocMap(allocation("a", "1g.10gb", 0, 1, deleting, holding("MIG-0")))},
			results: func(*job) opResult { return opResult{} },
			want: settled{Released: []string{"a"}, Notes: []string{"- OrphanReclaimed", "a SliceDestroyed"}, Forget: []string{"MIG-new"},
				Mutated: true, Reclaimed: map[string]int{"pod_gone": 1, "no_allocation": 1}},
		},
		{
			name: "a failed destroy keeps the finalizer, retries, and says Releasing",
			w:    world{Obs: h100(s0), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1, deleting, holding("MIG-0")))},
			results: func(*job) opResult {
				return opResult{Err: errors.Join(errors.New("boom"), nvml.NewError("destroy", nvml.ErrorUnknown, ""))}
			},
			want: settled{Statuses: []string{"a=Releasing/NVMLError"}, Notes: []string{"a NVMLError"}, Retry: true, Mutated: true},
		},
		{
			name: "a double allocation fails, with one event and one count; an allocation already Failed gets neither",
			w: world{Obs: h100(s0), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1, holding("MIG-0")),
				allocation("b", "2g.20gb", 0, 2), allocation("c", "3g.40gb", 0, 4, inState(slicerv1alpha1.AllocationFailed)))},
			want: settled{Statuses: []string{"b=Failed/PlacementConflict", "c=Failed/PlacementConflict"}, Bound: []string{"a=MIG-0"},
				Notes: []string{"b PlacementConflict"}, Retry: true, Conflicts: 1},
		},
		{
			name:    "after a reboot: a Ready allocation's slice, gone, is recreated at its slot with an event",
			w:       world{Obs: h100(), Allocs: allocMap(allocation("a", "1g.10gb", 2, 1, holding("MIG-before"), inState(slicerv1alpha1.AllocationReady)))},
			results: func(*job) opResult { return opResult{Slice: created} },
			want:    settled{Bound: []string{"a=MIG-new"}, Notes: []string{"a SliceRecreated"}, Mutated: true},
		},
		{
			name: "after a reboot: a Ready allocation whose slot an orphan overlaps waits, with one warning (none once Pending)",
			w: world{Obs: h100(engine.Slice{Slot: slot(testGPU, "1g.20gb", 2, 2), GI: 5, CI: 0, MIGUUID: "MIG-foreign"}), Now: now, Grace: time.Hour,
				Allocs: allocMap(allocation("a", "1g.10gb", 2, 1, holding("MIG-before"), inState(slicerv1alpha1.AllocationReady)),
					allocation("b", "1g.10gb", 3, 1, holding("MIG-b"), inState(slicerv1alpha1.AllocationPending)))},
			want: settled{Statuses: []string{"a=Pending/WaitingForOrphan", "b=Pending/WaitingForOrphan"}, Notes: []string{"a SliceLost"}, Retry: true},
		},
		{
			name: "a deleting allocation whose slice is in use waits as Releasing, with a warning",
			w: world{Obs: h100(s0), Allocs: allocMap(allocation("a", "1g.10gb", 0, 1, deleting, holding("MIG-0"))),
				Usage: map[string]string{"MIG-0": "ns/p-a"}},
			want: settled{Statuses: []string{"a=Releasing/InUse"}, Notes: []string{"a InUse"}, Retry: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.w)
			for _, j := range d.Jobs {
				j.result = tc.results(j)
			}
			o := settle(tc.w, d, logr.Discard())
			got := settled{Statuses: statusStrings(o.Statuses), Released: keyNames(o.Released), Forget: o.Forget,
				Retry: o.Retry, Mutated: o.Mutated, Reclaimed: o.Reclaimed, Conflicts: o.Conflicts}
			for k, s := range o.Bound {
				got.Bound = append(got.Bound, k.Name+"="+s.MIGUUID)
			}
			sort.Strings(got.Bound)
			for _, n := range o.Notes {
				who := "-"
				if n.Key.Name != "" {
					who = n.Key.Name
				}
				got.Notes = append(got.Notes, who+" "+n.Reason)
			}
			sort.Strings(got.Notes)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("settle (-want +got):\n%s", diff)
			}
		})
	}
}

// A GPU whose instances could not be listed decides nothing for its allocations: a Ready one
// keeps its status and its device (unhealthy), one being created waits, one being deleted is
// not released (its slice would be taken for gone and leak).
func TestDecideUnobservedGPU(t *testing.T) {
	obs := h100()
	obs.GPUs[0].Healthy, obs.GPUs[0].Err = false, errors.New("nvml DeviceGetGpuInstances: ERROR_GPU_IS_LOST")
	gi, ci := int32(1), int32(0)
	ready := allocation("ready", "1g.10gb", 0, 1, holding("MIG-r"), inState(slicerv1alpha1.AllocationReady), func(a *slicerv1alpha1.SliceAllocation) {
		a.Status.GPUInstanceID, a.Status.ComputeInstanceID = &gi, &ci
	})
	d := decide(world{Obs: obs, Allocs: allocMap(ready, allocation("new", "1g.10gb", 1, 1), allocation("gone", "1g.10gb", 2, 1, holding("MIG-g"), deleting)),
		OrphanSince: engine.OrphanClock{}, Now: time.Unix(1000, 0)})
	if len(d.Jobs) != 0 || len(d.Released) != 0 {
		t.Fatalf("jobs %v, released %v on a GPU not observed", d.Jobs, d.Released)
	}
	if diff := cmp.Diff([]string{"gone=Releasing/NVMLError", "new=Pending/NVMLError"}, statusStrings(d.Statuses)); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	s, ok := d.Unobserved[types.NamespacedName{Namespace: "ns", Name: "ready"}]
	if !ok || s.MIGUUID != "MIG-r" || s.GI != 1 || s.CI != 0 || s.Placement != (mig.Placement{Start: 0, Size: 1}) {
		t.Errorf("the Ready allocation's slice %+v, %v", s, ok)
	}
}

// A destroy that reported success but whose GPU instance is still observed afterwards is not
// a release: the finalizer stays, the orphan stays tracked, no success is reported.
func TestConfirmDestroys(t *testing.T) {
	k := types.NamespacedName{Namespace: "ns", Name: "a"}
	left := engine.Slice{Slot: mig.Slot{GPU: testGPU, Profile: "1g.10gb", Placement: mig.Placement{Start: 0, Size: 1}}, GI: 3, CI: -1}
	orphan := engine.Slice{Slot: mig.Slot{GPU: testGPU, Profile: "1g.10gb", Placement: mig.Placement{Start: 1, Size: 1}}, GI: 4, CI: -1}
	gone := engine.Slice{Slot: mig.Slot{GPU: testGPU, Profile: "1g.10gb", Placement: mig.Placement{Start: 2, Size: 1}}, GI: 5, CI: -1}
	jobs := []*job{
		{key: k, kind: jobDestroy, slot: left.Slot, slice: left},
		{kind: jobDestroy, slot: orphan.Slot, slice: orphan},
		{key: types.NamespacedName{Namespace: "ns", Name: "b"}, kind: jobDestroy, slot: gone.Slot, slice: gone},
	}
	o := outcome{Released: map[types.NamespacedName]bool{k: true, {Namespace: "ns", Name: "b"}: true}, Reclaimed: map[string]int{"pod_gone": 2, "no_allocation": 1},
		Forget: []string{orphan.Key()}, Notes: []note{notef(k, "Normal", "SliceDestroyed", "destroyed %s", left.Slot)}}
	o.confirm(h100(left, orphan), jobs)
	if o.Released[k] || !o.Released[types.NamespacedName{Namespace: "ns", Name: "b"}] || len(o.Forget) != 0 || !o.Retry || len(o.Notes) != 0 {
		t.Fatalf("after confirm: released %v, forget %v, retry %v, notes %v", o.Released, o.Forget, o.Retry, o.Notes)
	}
	if o.Reclaimed["pod_gone"] != 1 || o.Reclaimed["no_allocation"] != 0 {
		t.Fatalf("reclaimed %v", o.Reclaimed)
	}
}

// An observation after the destroy that could not list the GPU's instances confirms nothing:
// the allocation keeps its finalizer until the GPU is observed without its instance.
func TestConfirmNeedsTheGPUObserved(t *testing.T) {
	k := types.NamespacedName{Namespace: "ns", Name: "a"}
	s := engine.Slice{Slot: mig.Slot{GPU: testGPU, Profile: "1g.10gb", Placement: mig.Placement{Start: 2, Size: 1}}, GI: 3, CI: -1}
	o := outcome{Released: map[types.NamespacedName]bool{k: true}, Reclaimed: map[string]int{"pod_gone": 1}}
	obs := h100()
	obs.GPUs[0].Healthy, obs.GPUs[0].Err = false, errors.New("nvml DeviceGetGpuInstances: ERROR_UNKNOWN")
	o.confirm(obs, []*job{{key: k, kind: jobDestroy, slot: s.Slot, slice: s}})
	if o.Released[k] || !o.Retry {
		t.Fatalf("released on an observation that could not see the GPU's instances: %+v", o)
	}
}
