package dra

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
)

// cachedDriver is a driver whose claim cache holds cached and whose API holds live.
func cachedDriver(t *testing.T, cached []*resourceapi.ResourceClaim, live ...*resourceapi.ResourceClaim) *Driver {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, c := range cached {
		if err := idx.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	cs := fake.NewClientset()
	for _, c := range live {
		if _, err := cs.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	d := New(Options{NodeName: "node-1", Client: cs})
	d.claimLister = resourcelisters.NewResourceClaimLister(idx)
	return d
}

// The claims the kubelet hands Prepare replace their cached copies; the others stay.
func TestClaimsPutGivenOverCache(t *testing.T) {
	stale, other := claim("a", "node-1"), claim("b", "node-1", "gpu-0-1g-10gb-at-0")
	fresh := claim("a", "node-1", "gpu-0-3g-40gb-at-4")
	d := cachedDriver(t, []*resourceapi.ResourceClaim{&stale, &other})
	got, err := d.claims(&fresh)
	if err != nil {
		t.Fatal(err)
	}
	held := explained(got, "node-1")
	if len(got) != 2 || len(held["gpu-0-3g-40gb-at-4"]) != 1 || len(held["gpu-0-1g-10gb-at-0"]) != 1 {
		t.Fatalf("claims %d, held %v", len(got), held)
	}
	if _, err := New(Options{}).claims(); err == nil {
		t.Fatal("claims read before the cache started")
	}
}

// A double allocation the cache shows is only confirmed by the API: a claim deleted since
// (or recreated under its name) holds nothing.
func TestStillHoldsReadsLive(t *testing.T) {
	held, gone := claim("a", "node-1", "gpu-0-1g-10gb-at-0"), claim("b", "node-1", "gpu-0-1g-10gb-at-0")
	recreated := claim("x", "node-1", "gpu-0-1g-10gb-at-0")
	recreated.Name = gone.Name // b's name, another UID
	d := cachedDriver(t, []*resourceapi.ResourceClaim{&held, &gone}, &held)
	all, err := d.claims()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uid, device string
		want        bool
	}{
		{"uid-a", "gpu-0-1g-10gb-at-0", true},
		{"uid-a", "gpu-0-1g-10gb-at-1", false},
		{"uid-b", "gpu-0-1g-10gb-at-0", false},
	} {
		got, err := d.stillHolds(context.Background(), all, tc.uid, tc.device)
		if err != nil || got != tc.want {
			t.Errorf("stillHolds(%s, %s) = %v, %v; want %v", tc.uid, tc.device, got, err, tc.want)
		}
	}
	d = cachedDriver(t, []*resourceapi.ResourceClaim{&gone}, &recreated)
	if got, err := d.stillHolds(context.Background(), []*resourceapi.ResourceClaim{&gone}, "uid-b", "gpu-0-1g-10gb-at-0"); err != nil || got {
		t.Errorf("a claim recreated under the name: %v, %v", got, err)
	}
}

// Only claims allocated in this pool (or their tombstones) ask for a sync.
func TestInPool(t *testing.T) {
	d := New(Options{NodeName: "node-1"})
	mine, theirs := claim("a", "node-1", "gpu-0-1g-10gb-at-0"), claim("b", "node-2", "gpu-0-1g-10gb-at-0")
	pending := mine.DeepCopy()
	pending.Status.Allocation = nil
	for _, tc := range []struct {
		name string
		obj  any
		want bool
	}{
		{"mine", &mine, true},
		{"tombstone of mine", cache.DeletedFinalStateUnknown{Key: "ns/c-a", Obj: &mine}, true},
		{"another pool's", &theirs, false},
		{"unallocated", pending, false},
	} {
		if got := d.inPool(tc.obj); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}
