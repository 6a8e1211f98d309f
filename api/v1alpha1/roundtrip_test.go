package v1alpha1_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// covers A5: random objects survive JSON round trips and DeepCopy.

func newObjects() []runtime.Object {
	return []runtime.Object{
		&slicerv1alpha1.Slicer{}, &slicerv1alpha1.SlicerList{},
		&slicerv1alpha1.NodeAccelerator{}, &slicerv1alpha1.NodeAcceleratorList{},
		&slicerv1alpha1.SliceAllocation{}, &slicerv1alpha1.SliceAllocationList{},
	}
}

// filler fills objects with random values that JSON can represent exactly
// (times at second precision, no managed-fields noise).
func filler(f *randfill.Filler) *randfill.Filler {
	return f.NilChance(0.2).NumElements(0, 3).Funcs(
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.Unix(c.Int63n(4_000_000_000), 0).Rfc3339Copy()
		},
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			c.FillNoCustom(m)
			m.ManagedFields = nil
			m.CreationTimestamp = metav1.Unix(c.Int63n(4_000_000_000), 0).Rfc3339Copy()
			m.DeletionTimestamp = nil
		},
		func(m *metav1.TypeMeta, _ randfill.Continue) { *m = metav1.TypeMeta{} },
		func(m *metav1.ListMeta, c randfill.Continue) { m.ResourceVersion = c.String(8) },
	)
}

func roundTrip(t *testing.T, f *randfill.Filler) {
	t.Helper()
	for _, proto := range newObjects() {
		obj := proto.DeepCopyObject()
		f.Fill(obj)
		copied := obj.DeepCopyObject()
		if !apiequality.Semantic.DeepEqual(obj, copied) {
			t.Fatalf("%T: DeepCopy differs:\n%s", obj, cmp.Diff(obj, copied))
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatalf("%T: marshal: %v", obj, err)
		}
		decoded := proto.DeepCopyObject()
		if err := json.Unmarshal(raw, decoded); err != nil {
			t.Fatalf("%T: unmarshal: %v", obj, err)
		}
		if !apiequality.Semantic.DeepEqual(obj, decoded) {
			t.Fatalf("%T: JSON round trip lost data:\n%s", obj, cmp.Diff(obj, decoded))
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for seed := int64(0); seed < 200; seed++ {
		roundTrip(t, filler(randfill.NewWithSeed(seed)))
	}
}

func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("slicer"))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, filler(randfill.NewFromGoFuzz(data)))
	})
}
