package plugin

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
	"github.com/slicer-operator/slicer/test/builder"
)

// TestClaimPledgeTakesOnlyTheReplacement: the room held for the replacement of pod b/web (a
// 1g.10gb of the ReplicaSet uid-rs) goes to a pod of namespace b owned by that ReplicaSet and
// asking for a 1g.10gb, and to no other: not to a pod of another namespace whose owner reference
// names the same controller (a tenant writes its pods' owner references), nor to one of another
// profile or another controller.
func TestClaimPledgeTakesOnlyTheReplacement(t *testing.T) {
	room := snapshot.Slot{Slot: mig.Slot{GPU: "GPU-n10", Profile: "1g.10gb", Placement: mig.Placement{Start: 6, Size: 1}}}
	const rs = types.UID("uid-rs")
	pod := func(ns, name string, owner types.UID, profile string) *corev1.Pod {
		p := builder.Pod(ns, name).UID("uid-"+ns+"-"+name).Container("c", builder.Limits("slicer.dev/mig-"+profile, "1")).Obj()
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: owner, Controller: ptr.To(true)}}
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		takes bool
	}{
		{"the replacement", pod("b", "web-2", rs, "1g.10gb"), true},
		{"another namespace naming the same controller", pod("a", "thief", rs, "1g.10gb"), false},
		{"another profile", pod("b", "web-3", rs, "2g.20gb"), false},
		{"another controller", pod("b", "other", "uid-other", "1g.10gb"), false},
		{"no controller", pod("b", "bare", "", "1g.10gb"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlugin(t, accel("n1", 1))
			pl := &pledge{key: p.defrag.evictor.newPledgeKey(), ownerKey: ownerKey("b", rs), movedKey: podKey("uid-b-web"), profile: "1g.10gb",
				node: "n1", slot: room, moved: "b/web", deadline: time.Now().Add(time.Minute)}
			if err := p.cache.Reserve(pl.reservation()); err != nil {
				t.Fatal(err)
			}
			p.defrag.evictor.addPledge(pl)
			s := podStateFor(t, tc.pod)
			if st := p.defrag.evictor.claim(logr.Discard(), tc.pod, s); st != nil {
				t.Fatalf("claimPledge: %v", st)
			}
			took := p.held.slots(tc.pod.UID, "n1") != nil
			held := p.cache.Reservation(pl.key) != nil
			if took != tc.takes || held == tc.takes {
				t.Fatalf("took the room %v (held for the replacement still: %v); want took %v", took, held, tc.takes)
			}
		})
	}
}

// podStateFor is the cycle state PreFilter writes for a pod without allocations.
func podStateFor(t *testing.T, pod *corev1.Pod) *podState {
	t.Helper()
	items, err := PodRequest(pod)
	if err != nil {
		t.Fatal(err)
	}
	req, err := mig.NewRequest(items...)
	if err != nil {
		t.Fatal(err)
	}
	s := &podState{slices: req.Slices(), req: req}
	for i := range s.slices {
		s.missing = append(s.missing, int32(i))
	}
	return s
}

// TestPlanRecordNamesNoOtherTenant: the record on a pending pod of namespace a, which whoever
// may read a's pods reads, names a moved pod of namespace b and its controller by digest only,
// and a moved pod of a by name; the digests are what a restart matches them by.
func TestPlanRecordNamesNoOtherTenant(t *testing.T) {
	at := func(gpu string, start int) snapshot.Slot {
		return snapshot.Slot{Slot: mig.Slot{GPU: gpu, Profile: "1g.10gb", Placement: mig.Placement{Start: start, Size: 1}}}
	}
	held := []*pledge{
		{ownerKey: ownerKey("b", "uid-rs-b"), movedKey: podKey("uid-b-web"), profile: "1g.10gb", node: "n2", slot: at("GPU-n20", 6),
			fromNode: "n1", from: at("GPU-n10", 3), moved: "b/web"},
		{ownerKey: ownerKey("a", "uid-rs-a"), movedKey: podKey("uid-a-app"), profile: "1g.10gb", node: "n2", slot: at("GPU-n20", 5),
			fromNode: "n1", from: at("GPU-n10", 4), moved: "a/app"},
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rec := newPlanRecord(now, now.Add(time.Minute), "n1", []snapshot.Slot{{Slot: mig.Slot{GPU: "GPU-n10", Profile: "7g.80gb", Placement: mig.Placement{Start: 0, Size: 8}}}}, "a", held)
	cond, err := planCondition(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"b/", "web", "uid-b-web", "uid-rs-b", "uid-rs-a", "uid-a-app"} {
		if strings.Contains(cond.Message, secret) {
			t.Errorf("the record names %q: %s", secret, cond.Message)
		}
	}
	if !strings.Contains(cond.Message, `"pod":"a/app"`) {
		t.Errorf("the record does not name the pending pod's own namespace's moved pod: %s", cond.Message)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "big"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{cond}}}
	back, ok, err := readPlanRecord(pod)
	if err != nil || !ok {
		t.Fatalf("read back: %v %v", ok, err)
	}
	if back.Moves[0].OwnerKey != ownerKey("b", "uid-rs-b") || back.Moves[0].PodKey != podKey("uid-b-web") || back.Moves[0].FromNode != "n1" {
		t.Fatalf("read back %+v", back.Moves[0])
	}
}
