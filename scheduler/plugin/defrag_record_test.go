package plugin

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// TestRestorePlans: a restarted scheduler rebuilds Evict mode's state from the record on the
// pending pod. One move: pod "web" (1g.10gb) went from GPU 1 to GPU 0 @6, opening GPU 1 @0 for
// a 7g.80gb pod "big" on node n1.
func TestRestorePlans(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	dest := mig.Slot{GPU: "GPU-n10", Profile: "1g.10gb", Placement: mig.Placement{Start: 6, Size: 1}}
	from := mig.Slot{GPU: "GPU-n11", Profile: "1g.10gb", Placement: mig.Placement{Start: 3, Size: 1}}
	target := mig.Slot{GPU: "GPU-n11", Profile: "7g.80gb", Placement: mig.Placement{Start: 0, Size: 8}}
	const webUID, owner = types.UID("uid-web"), types.UID("uid-rs")
	record := func(deadline time.Time) planRecord {
		return newPlanRecord(now.Add(-time.Minute), deadline, "n1", []snapshot.Slot{{Slot: target}}, "ns",
			[]*pledge{{ownerKey: ownerKey("ns", owner), movedKey: podKey(webUID), profile: "1g.10gb", node: "n1",
				slot: snapshot.Slot{Slot: dest}, fromNode: "n1", from: snapshot.Slot{Slot: from}, moved: "ns/web"}})
	}
	// legacy is the record an earlier release wrote: UIDs, no digests, no source slot.
	legacy := func(deadline time.Time) planRecord {
		rec := record(deadline)
		rec.Moves[0] = recordMove{Pod: "ns/web", UID: webUID, Owner: owner, Node: "n1", To: recordSlot(dest)}
		return rec
	}
	web := func(terminating bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: webUID}, Spec: corev1.PodSpec{NodeName: "n1"}}
		if terminating {
			p.DeletionTimestamp = &metav1.Time{Time: now}
		}
		return p
	}
	type want struct {
		pledges, deferred int  // rooms held for the replacement, and of those deferred
		reserved          int  // reservations in the snapshot
		nominated         bool // big's nomination to GPU 1 @0, and its plan waiting
		evictions         int  // counted against the cap
	}
	for _, tc := range []struct {
		name     string
		rec      planRecord
		garbage  bool        // the condition's message is not a record
		bound    bool        // big is bound
		deleting bool        // big is being deleted
		web      *corev1.Pod // the moved pod as the informer has it (nil: gone)
		holder   types.UID   // a pod holding the destination ("": free)
		slice    bool        // the moved pod's slice is still where it was
		want     want
	}{
		{name: "evicted and gone, room free", rec: record(now.Add(4 * time.Minute)),
			want: want{pledges: 1, reserved: 1, nominated: true, evictions: 1}},
		{name: "still terminating, room free", rec: record(now.Add(4 * time.Minute)), web: web(true),
			want: want{pledges: 1, reserved: 1, nominated: true, evictions: 1}},
		{name: "its slice still holds the room (an Ordered plan)", rec: record(now.Add(4 * time.Minute)), web: web(true), holder: webUID,
			want: want{pledges: 1, deferred: 1, nominated: true, evictions: 1}},
		{name: "the replacement took the room before the restart", rec: record(now.Add(4 * time.Minute)), holder: "uid-web-2",
			want: want{nominated: true, evictions: 1}},
		{name: "cut short: the moved pod was never evicted", rec: record(now.Add(4 * time.Minute)), web: web(false), slice: true},
		{name: "evicted, its slice not yet released", rec: record(now.Add(4 * time.Minute)), web: web(true), slice: true,
			want: want{pledges: 1, reserved: 1, nominated: true, evictions: 1}},
		{name: "an earlier release's record: evicted and gone", rec: legacy(now.Add(4 * time.Minute)),
			want: want{pledges: 1, reserved: 1, nominated: true, evictions: 1}},
		{name: "an earlier release's record: cut short", rec: legacy(now.Add(4 * time.Minute)), web: web(false)},
		{name: "its time is over", rec: record(now)},
		// The pending pod bound before the restart: its moves' rooms are still held for the
		// replacements.
		{name: "the pod is bound", rec: record(now.Add(4 * time.Minute)), bound: true,
			want: want{pledges: 1, reserved: 1, evictions: 1}},
		{name: "the pod is being deleted", rec: record(now.Add(4 * time.Minute)), deleting: true,
			want: want{pledges: 1, reserved: 1, evictions: 1}},
		{name: "an unreadable record", rec: record(now.Add(4 * time.Minute)), garbage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlugin(t, accel("n1", 2))
			setDefragPolicy(p, defragPolicy{mode: slicerv1alpha1.DefragmentationEvict})
			setClock(p, func() time.Time { return now })
			p.defrag.evictor.replacementTimeout = DefaultDefragReplacementTimeout
			if tc.holder != "" {
				p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: "holder-0", PodName: "holder", PodUID: tc.holder,
					NodeName: "n1", Slot: snapshot.Slot{Slot: dest}})
			}
			if tc.slice {
				p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: "web-0", PodName: "web", PodUID: webUID,
					NodeName: "n1", Slot: snapshot.Slot{Slot: from}})
			}
			big := migPod("big", "slicer.dev/mig-7g.80gb", "1")
			cond, err := planCondition(tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.garbage {
				cond.Message = "{not json"
			}
			big.Status.Conditions = []corev1.PodCondition{cond}
			if tc.bound {
				big.Spec.NodeName = "n1"
			}
			if tc.deleting {
				big.DeletionTimestamp = &metav1.Time{Time: now}
			}
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			for _, pod := range []*corev1.Pod{big, tc.web} {
				if pod != nil {
					if err := idx.Add(pod); err != nil {
						t.Fatal(err)
					}
				}
			}
			p.pods = corelisters.NewPodLister(idx)
			p.defrag.evictor.pods = p.pods

			p.defrag.evictor.restorePlans(logr.Discard())

			deferred := 0
			for key := range p.defrag.evictor.run.pledges {
				if p.cache.Waiting(key) {
					deferred++
				}
			}
			got := want{pledges: len(p.defrag.evictor.run.pledges), deferred: deferred, reserved: p.cache.ReservationCount(),
				nominated: p.held.slots(big.UID, "n1") != nil, evictions: len(p.defrag.evictor.run.evictions)}
			if _, waits := p.defrag.evictor.run.plans[big.UID]; waits != got.nominated {
				t.Fatalf("plan waiting %v, nominated %v: want both or neither", waits, got.nominated)
			}
			if got != tc.want {
				t.Fatalf("restored %+v; want %+v", got, tc.want)
			}
			if got.nominated {
				if s := p.held.slots(big.UID, "n1"); len(s) != 1 || s[0].Slot != target {
					t.Fatalf("nominated to %v; want %v", s, target)
				}
			}
			for _, pl := range p.defrag.evictor.run.pledges {
				if pl.ownerKey != ownerKey("ns", owner) || pl.movedKey != podKey(webUID) || pl.profile != "1g.10gb" ||
					pl.slot.Slot != dest || pl.moved != "ns/web" || !pl.deadline.Equal(tc.rec.Deadline) {
					t.Fatalf("pledge %+v; want web's room at %v for its owner until %v", pl, dest, tc.rec.Deadline)
				}
			}
		})
	}
}

// TestRestorePlansBoundsTheDeadline: a record is held for no longer than a replacement timeout
// from the restart, whatever deadline it names.
func TestRestorePlansBoundsTheDeadline(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	p := testPlugin(t, accel("n1", 1))
	setDefragPolicy(p, defragPolicy{mode: slicerv1alpha1.DefragmentationEvict})
	setClock(p, func() time.Time { return now })
	p.defrag.evictor.replacementTimeout = time.Minute
	dest := mig.Slot{GPU: "GPU-n10", Profile: "1g.10gb", Placement: mig.Placement{Start: 6, Size: 1}}
	rec := newPlanRecord(now, now.Add(time.Hour), "n1", []snapshot.Slot{{Slot: mig.Slot{GPU: "GPU-n10", Profile: "3g.40gb", Placement: mig.Placement{Start: 0, Size: 4}}}}, "ns",
		[]*pledge{{ownerKey: ownerKey("ns", "uid-rs"), movedKey: podKey("uid-web"), profile: "1g.10gb", node: "n1",
			slot: snapshot.Slot{Slot: dest}, moved: "ns/web"}})
	cond, err := planCondition(rec)
	if err != nil {
		t.Fatal(err)
	}
	big := migPod("big", "slicer.dev/mig-3g.40gb", "1")
	big.Status.Conditions = []corev1.PodCondition{cond}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := idx.Add(big); err != nil {
		t.Fatal(err)
	}
	p.pods = corelisters.NewPodLister(idx)
	p.defrag.evictor.pods = p.pods
	p.defrag.evictor.restorePlans(logr.Discard())
	if d, ok := p.defrag.evictor.run.plans[big.UID]; !ok || !d.Equal(now.Add(time.Minute)) {
		t.Fatalf("plan deadline %v (restored %v); want %v", d, ok, now.Add(time.Minute))
	}
	for _, pl := range p.defrag.evictor.run.pledges {
		if !pl.deadline.Equal(now.Add(time.Minute)) {
			t.Fatalf("pledge deadline %v; want %v", pl.deadline, now.Add(time.Minute))
		}
	}
}

// TestRestoreHoldsARoomAMovedSliceOfAnotherShapeStillHolds: the repack plan of
// TestPlanRepackOrderedExample on node n1 GPU 1 (web-2's 1g.10gb moves from 6 to 5, web-1's
// 1g.20gb from 2 into 6-7), recorded, and the scheduler restarted while web-2's slice is still at
// 6. web-1's room (1g.20gb@6) overlaps that slice without being it: it is held deferred, and the
// snapshot takes it in the very change that releases web-2's slice, before anyone else can: a
// 1g.20gb pod filtered right after finds no room there.
func TestRestoreHoldsARoomAMovedSliceOfAnotherShapeStillHolds(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := func(profile string, start, size int) snapshot.Slot {
		return snapshot.Slot{Slot: mig.Slot{GPU: "GPU-n11", Profile: profile, Placement: mig.Placement{Start: start, Size: size}}}
	}
	p := testPlugin(t, accel("n1", 2))
	setDefragPolicy(p, defragPolicy{mode: slicerv1alpha1.DefragmentationEvict})
	setClock(p, func() time.Time { return now })
	p.defrag.evictor.replacementTimeout = DefaultDefragReplacementTimeout
	// GPU 0 full; GPU 1: keep at 4, web-2's slice still at 6 (its pod terminating).
	p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: "full-0", PodName: "full", PodUID: "uid-full", NodeName: "n1",
		Slot: snapshot.Slot{Slot: mig.Slot{GPU: "GPU-n10", Profile: "7g.80gb", Placement: mig.Placement{Start: 0, Size: 8}}}})
	p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: "keep-0", PodName: "keep", PodUID: "uid-keep", NodeName: "n1", Slot: at("1g.10gb", 4, 1)})
	p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: "web-2-0", PodName: "web-2", PodUID: "uid-web-2", NodeName: "n1", Slot: at("1g.10gb", 6, 1)})
	held := []*pledge{
		{ownerKey: ownerKey("ns", "uid-rs"), movedKey: podKey("uid-web-2"), profile: "1g.10gb", node: "n1", slot: at("1g.10gb", 5, 1),
			fromNode: "n1", from: at("1g.10gb", 6, 1), moved: "ns/web-2"},
		{ownerKey: ownerKey("ns", "uid-rs"), movedKey: podKey("uid-web-1"), profile: "1g.20gb", node: "n1", slot: at("1g.20gb", 6, 2),
			fromNode: "n1", from: at("1g.20gb", 2, 2), moved: "ns/web-1"},
	}
	cond, err := planCondition(newPlanRecord(now.Add(-time.Minute), now.Add(4*time.Minute), "n1", []snapshot.Slot{at("4g.40gb", 0, 4)}, "ns", held))
	if err != nil {
		t.Fatal(err)
	}
	big := migPod("big", "slicer.dev/mig-4g.40gb", "1")
	big.Status.Conditions = []corev1.PodCondition{cond}
	web2 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-2", UID: "uid-web-2", DeletionTimestamp: &metav1.Time{Time: now}},
		Spec: corev1.PodSpec{NodeName: "n1"}}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, pod := range []*corev1.Pod{big, web2} {
		if err := idx.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	p.pods = corelisters.NewPodLister(idx)
	p.defrag.evictor.pods = p.pods

	p.defrag.evictor.restored.Do(func() { p.defrag.evictor.restorePlans(logr.Discard()) }) // as the first PreFilter does

	waiting := 0
	for key := range p.defrag.evictor.run.pledges {
		if p.cache.Waiting(key) {
			waiting++
		}
	}
	if len(p.defrag.evictor.run.pledges) != 2 || waiting != 1 || p.cache.ReservationCount() != 1 {
		t.Fatalf("restored %d pledges, %d waiting, %d reservations; want 2, 1 (web-1's room at 6), 1", len(p.defrag.evictor.run.pledges), waiting, p.cache.ReservationCount())
	}
	// The agent releases web-2's slice: the room at 6-7 is held in that same change.
	p.cache.DeleteAllocation("ns", "web-2-0")
	if p.cache.ReservationCount() != 2 {
		t.Fatalf("%d reservations after web-2's slice is released; want 2: web-1's room is held at once", p.cache.ReservationCount())
	}
	rival := migPod("rival", "slicer.dev/mig-1g.20gb", "1")
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), cs, rival, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if st := p.Filter(context.Background(), cs, rival, nodeInfo("n1", nil)); st.IsSuccess() {
		t.Fatal("a 1g.20gb pod fits n1 once web-2's slice is gone: the room held for web-1's replacement is free")
	}
}

// A plan for whole GPUs records every GPU it emptied (targets), read back as whole slots with
// their request indexes; a plan for a slice records its one target as before, with no targets.
func TestPlanRecordOfWholeGPUs(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	whole := []snapshot.Slot{{Slot: mig.WholeSlot("GPU-a")}, {Slot: mig.WholeSlot("GPU-c"), Index: 1}}
	cond, err := planCondition(newPlanRecord(now, now.Add(time.Minute), "n1", whole, "ns", nil))
	if err != nil {
		t.Fatal(err)
	}
	rec, ok, err := readPlanRecord(&corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{cond}}})
	if err != nil || !ok {
		t.Fatalf("read back: %v, %v", ok, err)
	}
	got := rec.targets()
	if len(got) != 2 || got[0] != whole[0] || got[1] != whole[1] || !got[1].Whole() {
		t.Fatalf("targets %+v, want %+v", got, whole)
	}
	slice := []snapshot.Slot{{Slot: mig.Slot{GPU: "GPU-a", Profile: "7g.80gb", Placement: mig.Placement{Start: 0, Size: 8}}}}
	rec = newPlanRecord(now, now.Add(time.Minute), "n1", slice, "ns", nil)
	if len(rec.Targets) != 0 || len(rec.targets()) != 1 || rec.targets()[0] != slice[0] {
		t.Fatalf("a slice's record %+v", rec)
	}
}
