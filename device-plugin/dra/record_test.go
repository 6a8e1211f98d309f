package dra

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/internal/mig"
)

// A record keeps its claim's instances against any other claim whose slot overlaps them on
// the same GPU, never against the claim itself or another GPU's slots.
func TestPreparedFor(t *testing.T) {
	recs := map[string]record{
		"uid-a": {UID: "uid-a", Slices: []cdi.Slice{{MIGUUID: "MIG-a", GPUUUID: "GPU-0", Profile: "3g.40gb", PlacementStart: 4, PlacementSize: 4}}},
		"uid-b": {UID: "uid-b", Slices: []cdi.Slice{{MIGUUID: "MIG-b", GPUUUID: "GPU-1", Profile: "1g.10gb", PlacementStart: 0, PlacementSize: 1}}},
	}
	for _, tc := range []struct {
		name, uid string
		slot      mig.Slot
		want      string
	}{
		{"the same placement", "uid-x", slot("3g.40gb", 4, 4), "uid-a"},
		{"an overlapping placement of another profile", "uid-x", slot("1g.10gb", 6, 1), "uid-a"},
		{"a placement beside it", "uid-x", slot("4g.40gb", 0, 4), ""},
		{"the claim's own record", "uid-a", slot("3g.40gb", 4, 4), ""},
		{"another GPU's record does not reach GPU-0", "uid-x", slot("1g.10gb", 0, 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := preparedFor(recs, tc.uid, tc.slot)
			if ok != (tc.want != "") || got.UID != tc.want {
				t.Fatalf("preparedFor = %q, %v; want %q", got.UID, ok, tc.want)
			}
		})
	}
}

// What Prepare records: the claim and the pods it is reserved for, nothing else it consumes.
func TestClaimRecord(t *testing.T) {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{
		{Resource: "pods", Name: "p", UID: "u-p"},
		{APIGroup: "example.com", Resource: "pods", Name: "not-a-pod", UID: "u-x"},
	}
	got := claimRecord(c)
	if got.Namespace != "ns" || got.Name != "c" || len(got.Pods) != 1 || got.Pods[0] != (cdi.PodRef{Name: "p", UID: "u-p"}) {
		t.Fatalf("claimRecord = %+v", got)
	}
}
