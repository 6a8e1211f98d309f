package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func TestSubset(t *testing.T) {
	for _, tc := range []struct {
		name       string
		want, have any
		ok         bool
	}{
		{"equal", map[string]any{"a": int64(1)}, map[string]any{"a": int64(1)}, true},
		{"server default ignored", map[string]any{"a": "x"}, map[string]any{"a": "x", "b": true}, true},
		{"changed", map[string]any{"a": "x"}, map[string]any{"a": "y"}, false},
		{"missing", map[string]any{"a": "x"}, map[string]any{}, false},
		{"list longer", []any{"a"}, []any{"a", "b"}, false},
		{"list elements subset", []any{map[string]any{"n": "c"}}, []any{map[string]any{"n": "c", "d": int64(1)}}, true},
		{"numbers", map[string]any{"a": int64(2)}, map[string]any{"a": float64(2)}, true},
		{"empty map matches defaulted map", map[string]any{"e": map[string]any{}}, map[string]any{"e": map[string]any{"medium": ""}}, true},
		{"type mismatch", map[string]any{"a": map[string]any{}}, map[string]any{"a": "x"}, false},
	} {
		if got := subset(tc.want, tc.have); got != tc.ok {
			t.Errorf("%s: subset = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

func TestDesired(t *testing.T) {
	owner := &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: "default", UID: "u1"}}
	a := applier{owner: owner}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
	}
	u, err := a.desired(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Object["status"]; ok {
		t.Error("status kept")
	}
	if _, ok := u.Object["metadata"].(map[string]any)["creationTimestamp"]; ok {
		t.Error("creationTimestamp kept")
	}
	refs := u.GetOwnerReferences()
	if len(refs) != 1 || refs[0].UID != "u1" || !*refs[0].Controller {
		t.Errorf("owner references = %+v", refs)
	}
	h1 := u.GetAnnotations()[AppliedHashAnnotation]
	d.Spec.Replicas = ptr.To[int32](3)
	u2, _ := a.desired(d)
	if h1 == "" || h1 == u2.GetAnnotations()[AppliedHashAnnotation] {
		t.Error("hash does not follow the desired object")
	}
	if _, err := a.desired(&appsv1.Deployment{}); err == nil {
		t.Error("object without kind accepted")
	}
}
