package agent

import (
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig"
)

func key(n string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: n} }

func slot(gpu, prof string, start, size int) Slot {
	return Slot{GPU: gpu, Profile: prof, Placement: mig.Placement{Start: start, Size: size}}
}

func TestPlan(t *testing.T) {
	now := time.Unix(1000, 0)
	s0 := engine.Slice{Slot: slot("G0", "1g.10gb", 0, 1), GI: 1, CI: 0, MIGUUID: "MIG-0"}
	s1 := engine.Slice{Slot: slot("G0", "1g.10gb", 1, 1), GI: 2, CI: 0, MIGUUID: "MIG-1"}
	bare := engine.Slice{Slot: slot("G0", "2g.20gb", 2, 2), GI: 3, CI: -1}
	big := engine.Slice{Slot: slot("G0", "4g.40gb", 4, 4), GI: 4, CI: 0, MIGUUID: "MIG-4"}
	type summary struct {
		Bound, Create, Finish, Blocked, Conflict, Release, Wait, Orphans, Destroy []string
	}
	sum := func(p Plan) summary {
		var s summary
		for k, v := range p.Bound {
			s.Bound = append(s.Bound, k.Name+"="+v.MIGUUID)
		}
		for k, v := range p.Create {
			s.Create = append(s.Create, k.Name+"="+v.String())
		}
		for k := range p.Finish {
			s.Finish = append(s.Finish, k.Name)
		}
		for k, v := range p.Blocked {
			s.Blocked = append(s.Blocked, k.Name+"="+v[0])
		}
		for k := range p.Conflict {
			s.Conflict = append(s.Conflict, k.Name)
		}
		for k, v := range p.Release {
			d := "-"
			if v != nil {
				d = v.Key()
			}
			s.Release = append(s.Release, k.Name+"="+d)
		}
		for k := range p.ReleaseWait {
			s.Wait = append(s.Wait, k.Name)
		}
		for _, o := range p.Orphans {
			s.Orphans = append(s.Orphans, o.Key())
			if o.Destroy {
				s.Destroy = append(s.Destroy, o.Key())
			}
		}
		return s
	}
	tests := []struct {
		name string
		in   planInput
		want summary
	}{
		{
			name: "create on an empty GPU",
			in:   planInput{Wants: []Want{{Key: key("a"), Spec: slot("G0", "1g.10gb", 0, 1)}}},
			want: summary{Create: []string{"a=G0 1g.10gb@0"}},
		},
		{
			name: "adopt an existing slice, finish a bare GPU instance",
			in: planInput{Slices: []engine.Slice{s0, bare}, Wants: []Want{
				{Key: key("a"), Spec: s0.Slot}, {Key: key("b"), Spec: bare.Slot},
			}},
			want: summary{Bound: []string{"a=MIG-0"}, Finish: []string{"b"}},
		},
		{
			name: "an overlapping allocation is a conflict, an overlapping orphan blocks",
			in: planInput{Slices: []engine.Slice{s0, big}, Wants: []Want{
				{Key: key("a"), Spec: s0.Slot}, {Key: key("c"), Spec: slot("G0", "2g.20gb", 0, 2)}, {Key: key("d"), Spec: slot("G0", "1g.10gb", 5, 1)},
			}, OrphanSince: map[string]time.Time{"MIG-4": now}, Now: now, Grace: time.Minute},
			want: summary{Bound: []string{"a=MIG-0"}, Conflict: []string{"c"}, Blocked: []string{"d=WaitingForOrphan"}, Orphans: []string{"MIG-4"}},
		},
		{
			name: "orphans are destroyed after the grace period, never while used",
			in: planInput{Slices: []engine.Slice{s0, s1}, Use: map[string]string{"MIG-1": "pod-x"},
				OrphanSince: map[string]time.Time{"MIG-0": now.Add(-time.Hour), "MIG-1": now.Add(-time.Hour)}, Now: now, Grace: time.Minute},
			want: summary{Orphans: []string{"MIG-0", "MIG-1"}, Destroy: []string{"MIG-0"}},
		},
		{
			name: "release destroys the device really held, waits while in use",
			in: planInput{Slices: []engine.Slice{s0, s1}, Use: map[string]string{"MIG-1": "pod-b"}, Wants: []Want{
				{Key: key("a"), Spec: s0.Slot, Device: "MIG-0", Deleting: true},
				{Key: key("b"), Spec: s1.Slot, Device: "MIG-1", Deleting: true},
				{Key: key("c"), Spec: slot("G0", "1g.10gb", 2, 1), Deleting: true},
			}},
			want: summary{Release: []string{"a=MIG-0", "c=-"}, Wait: []string{"b"}},
		},
		{
			name: "kubelet swap: each allocation gets the slice its pod really uses",
			in: planInput{Slices: []engine.Slice{s0, s1}, Use: map[string]string{"MIG-0": "pod-b"}, Wants: []Want{
				{Key: key("a"), Pod: "pod-a", Spec: s0.Slot}, {Key: key("b"), Pod: "pod-b", Spec: s1.Slot},
			}},
			want: summary{Bound: []string{"a=MIG-1", "b=MIG-0"}},
		},
		{
			name: "cross-GPU kubelet swap: each allocation gets the slice its pod really uses",
			in: planInput{Slices: []engine.Slice{s0, {Slot: slot("G1", "1g.10gb", 0, 1), GI: 1, CI: 0, MIGUUID: "MIG-G1"}},
				Use: map[string]string{"MIG-G1": "pod-a", "MIG-0": "pod-b"}, Wants: []Want{
					{Key: key("a"), Pod: "pod-a", Spec: s0.Slot}, {Key: key("b"), Pod: "pod-b", Spec: slot("G1", "1g.10gb", 0, 1)},
				}},
			want: summary{Bound: []string{"a=MIG-G1", "b=MIG-0"}},
		},
		{
			name: "a recorded cross-GPU actual slot is kept once the kubelet no longer reports it",
			in: planInput{Slices: []engine.Slice{s0, {Slot: slot("G1", "1g.10gb", 0, 1), GI: 1, CI: 0, MIGUUID: "MIG-G1"}}, Wants: []Want{
				{Key: key("a"), Pod: "pod-a", Spec: s0.Slot, Actual: &Slot{GPU: "G1", Profile: "1g.10gb", Placement: mig.Placement{Start: 0, Size: 1}}},
			}, OrphanSince: map[string]time.Time{}, Now: now, Grace: time.Minute},
			// a's own slice is spare: no one waits for it, it goes without the grace period
			want: summary{Bound: []string{"a=MIG-G1"}, Orphans: []string{"MIG-0"}, Destroy: []string{"MIG-0"}},
		},
		{
			// Seen in the e2e churn: b's pod ended, the kubelet handed b's device to a's
			// pod; the slice realized for a is spare and goes now, b's goes with a.
			name: "a slice made for an allocation whose pod got a released pod's device is destroyed at once",
			in: planInput{Slices: []engine.Slice{s0, s1}, Use: map[string]string{"MIG-1": "pod-a"}, Wants: []Want{
				{Key: key("a"), Pod: "pod-a", Spec: s0.Slot, Device: "MIG-0"},
				{Key: key("b"), Pod: "pod-b", Spec: s1.Slot, Device: "MIG-1", Deleting: true},
			}, OrphanSince: map[string]time.Time{}, Now: now, Grace: time.Hour},
			want: summary{Bound: []string{"a=MIG-1"}, Release: []string{"b=-"}, Orphans: []string{"MIG-0"}, Destroy: []string{"MIG-0"}},
		},
		{
			name: "a spare slice a pod still uses is kept",
			in: planInput{Slices: []engine.Slice{s0, s1}, Use: map[string]string{"MIG-1": "pod-a", "MIG-0": "pod-c"}, Wants: []Want{
				{Key: key("a"), Pod: "pod-a", Spec: s0.Slot, Device: "MIG-0"},
			}, OrphanSince: map[string]time.Time{}, Now: now, Grace: time.Hour},
			want: summary{Bound: []string{"a=MIG-1"}, Orphans: []string{"MIG-0"}},
		},
		{
			name: "a deleting allocation never takes a slice a live one holds",
			in: planInput{Slices: []engine.Slice{s0}, Use: map[string]string{"MIG-0": "pod-b"}, Wants: []Want{
				{Key: key("a"), Pod: "pod-a", Spec: s0.Slot, Device: "MIG-0", Deleting: true}, {Key: key("b"), Pod: "pod-b", Spec: s1.Slot},
			}},
			want: summary{Bound: []string{"b=MIG-0"}, Release: []string{"a=-"}},
		},
	}
	sortAll := func(s *summary) {
		for _, l := range []*[]string{&s.Bound, &s.Create, &s.Finish, &s.Blocked, &s.Conflict, &s.Release, &s.Wait, &s.Orphans, &s.Destroy} {
			sort.Strings(*l)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := sum(plan(tc.in))
			sortAll(&got)
			sortAll(&tc.want)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
			// Pure: the same input gives the same plan.
			again := sum(plan(tc.in))
			sortAll(&again)
			if d := cmp.Diff(got, again); d != "" {
				t.Errorf("plan is not deterministic:\n%s", d)
			}
		})
	}
}

func TestWantFromAllocationActual(t *testing.T) {
	spec := slicerv1alpha1.SliceAllocationSpec{PodName: "p", NodeName: "n", GPUUUID: "GPU-1", Profile: "1g.10gb", Placement: &slicerv1alpha1.Placement{Start: 1, Size: 1}}
	tests := []struct {
		name   string
		status slicerv1alpha1.SliceAllocationStatus
		want   *Slot
	}{
		{name: "no actual", want: nil},
		{name: "actual equals spec", status: slicerv1alpha1.SliceAllocationStatus{ActualPlacement: &slicerv1alpha1.Placement{Start: 1, Size: 1}}, want: nil},
		{name: "other placement, same GPU", status: slicerv1alpha1.SliceAllocationStatus{ActualPlacement: &slicerv1alpha1.Placement{Start: 2, Size: 1}},
			want: &Slot{GPU: "GPU-1", Profile: "1g.10gb", Placement: mig.Placement{Start: 2, Size: 1}}},
		{name: "same placement on another GPU", status: slicerv1alpha1.SliceAllocationStatus{ActualGPUUUID: "GPU-0", ActualPlacement: &slicerv1alpha1.Placement{Start: 1, Size: 1}},
			want: &Slot{GPU: "GPU-0", Profile: "1g.10gb", Placement: mig.Placement{Start: 1, Size: 1}}},
		{name: "another GPU and placement", status: slicerv1alpha1.SliceAllocationStatus{ActualGPUUUID: "GPU-0", ActualPlacement: &slicerv1alpha1.Placement{Start: 6, Size: 1}},
			want: &Slot{GPU: "GPU-0", Profile: "1g.10gb", Placement: mig.Placement{Start: 6, Size: 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := &slicerv1alpha1.SliceAllocation{Spec: spec, Status: tc.status}
			if d := cmp.Diff(tc.want, wantFromAllocation(a).Actual); d != "" {
				t.Errorf("Actual (-want +got):\n%s", d)
			}
		})
	}
}

func TestReadyRecordsActualGPU(t *testing.T) {
	a := &slicerv1alpha1.SliceAllocation{Spec: slicerv1alpha1.SliceAllocationSpec{GPUUUID: "GPU-1", Profile: "1g.10gb", Placement: &slicerv1alpha1.Placement{Start: 1, Size: 1}}}
	tests := []struct {
		name      string
		sl        engine.Slice
		wantGPU   string
		wantPlace *slicerv1alpha1.Placement
	}{
		{name: "as planned", sl: engine.Slice{Slot: slot("GPU-1", "1g.10gb", 1, 1), MIGUUID: "MIG-a"}},
		{name: "other placement", sl: engine.Slice{Slot: slot("GPU-1", "1g.10gb", 3, 1), MIGUUID: "MIG-b"}, wantPlace: &slicerv1alpha1.Placement{Start: 3, Size: 1}},
		{name: "other GPU, same placement", sl: engine.Slice{Slot: slot("GPU-0", "1g.10gb", 1, 1), MIGUUID: "MIG-c"}, wantGPU: "GPU-0", wantPlace: &slicerv1alpha1.Placement{Start: 1, Size: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := ready(a, tc.sl)
			if d := cmp.Diff(tc.wantGPU, st.ActualGPUUUID); d != "" {
				t.Errorf("actualGPUUUID (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantPlace, st.ActualPlacement); d != "" {
				t.Errorf("actualPlacement (-want +got):\n%s", d)
			}
			// The status round-trips: the next plan wants the slice the pod really has.
			b := a.DeepCopy()
			b.Status = st
			if d := cmp.Diff(tc.sl.Slot, wantFromAllocation(b).desired()); d != "" {
				t.Errorf("desired slot after ready (-want +got):\n%s", d)
			}
		})
	}
}

// An instance an XID broke stays bound to the allocation that holds it; it is never handed to
// another allocation at its slot (that one waits while it is destroyed), and unused, it goes
// at once.
func TestPlanUnhealthyInstance(t *testing.T) {
	sick := engine.Slice{Slot: slot("G0", "1g.10gb", 0, 1), GI: 1, CI: 0, MIGUUID: "MIG-0", Unhealthy: "XID 94"}
	held := plan(planInput{Slices: []engine.Slice{sick}, Wants: []Want{{Key: key("a"), Pod: "ns/a", Spec: sick.Slot, Device: "MIG-0"}}, OrphanSince: engine.OrphanClock{}})
	if got := held.Bound[key("a")]; got.MIGUUID != "MIG-0" {
		t.Fatalf("the holder lost its unhealthy instance: %+v", held)
	}
	next := plan(planInput{Slices: []engine.Slice{sick}, Wants: []Want{{Key: key("b"), Pod: "ns/b", Spec: sick.Slot}}, OrphanSince: engine.OrphanClock{}})
	if _, bound := next.Bound[key("b")]; bound || next.Blocked[key("b")][0] != slicerv1alpha1.ReasonGPUUnhealthy {
		t.Fatalf("a new allocation at the unhealthy instance's slot: bound %v, blocked %v", next.Bound, next.Blocked)
	}
	if len(next.Orphans) != 1 || !next.Orphans[0].Destroy {
		t.Fatalf("the unused unhealthy instance is not destroyed now: %+v", next.Orphans)
	}
}
