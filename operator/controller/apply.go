package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

const (
	// FieldManager is the one server-side-apply field manager of the operator.
	FieldManager = slicerv1alpha1.OperatorName
	// AppliedHashAnnotation holds a hash of what the operator last applied,
	// so a change in the desired object is seen even when it removes fields.
	AppliedHashAnnotation = "slicer.dev/applied-hash"
)

// applier applies desired objects with server-side apply, skipping the
// write when the live object already holds everything desired (I6: a
// reconcile with nothing to change writes nothing).
type applier struct {
	c     client.Client
	owner *slicerv1alpha1.Slicer
}

// desired converts obj to the unstructured object to apply: owner
// reference to the Slicer, no status, no nulls, and the hash annotation.
func (a applier) desired(obj client.Object) (*unstructured.Unstructured, error) {
	var content map[string]any
	if u, ok := obj.(*unstructured.Unstructured); ok {
		content = runtime.DeepCopyJSON(u.Object)
	} else {
		var err error
		if content, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
			return nil, fmt.Errorf("convert %T: %w", obj, err)
		}
	}
	u := &unstructured.Unstructured{Object: content}
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return nil, fmt.Errorf("%T %s has no apiVersion/kind", obj, obj.GetName())
	}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	pruneNulls(u.Object)
	u.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion:         slicerv1alpha1.GroupVersion.String(),
		Kind:               "Slicer",
		Name:               a.owner.Name,
		UID:                a.owner.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}})
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("hash %s: %w", u.GetName(), err)
	}
	sum := sha256.Sum256(raw)
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AppliedHashAnnotation] = hex.EncodeToString(sum[:])[:20]
	u.SetAnnotations(ann)
	return u, nil
}

// apply makes obj's live counterpart hold the desired fields. It returns
// whether it wrote.
func (a applier) apply(ctx context.Context, obj client.Object) (bool, error) {
	want, err := a.desired(obj)
	if err != nil {
		return false, err
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(want.GroupVersionKind())
	err = a.c.Get(ctx, client.ObjectKeyFromObject(want), live)
	switch {
	case err == nil:
		if subset(want.Object, live.Object) {
			return false, nil
		}
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("get %s %s: %w", want.GetKind(), client.ObjectKeyFromObject(want), err)
	}
	if err := a.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(want), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("apply %s %s: %w", want.GetKind(), client.ObjectKeyFromObject(want), err)
	}
	return true, nil
}

// applyAll applies objs in order and counts the writes.
func (a applier) applyAll(ctx context.Context, objs []client.Object) (int, error) {
	n := 0
	for _, o := range objs {
		wrote, err := a.apply(ctx, o)
		if err != nil {
			return n, err
		}
		if wrote {
			n++
		}
	}
	return n, nil
}

// subset reports whether every field of want is in have with the same
// value. Lists must have the same length and match element by element;
// fields the server defaulted (only in have) are ignored.
func subset(want, have any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok || !subset(wv, hv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !subset(w[i], h[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(normalize(want), normalize(have))
	}
}

// normalize makes numbers comparable across typed conversion and JSON decoding.
func normalize(v any) any {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int32:
		return int64(n)
	case float64:
		if n == float64(int64(n)) {
			return int64(n)
		}
	}
	return v
}

func pruneNulls(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
				continue
			}
			pruneNulls(e)
		}
	case []any:
		for _, e := range x {
			pruneNulls(e)
		}
	}
}
