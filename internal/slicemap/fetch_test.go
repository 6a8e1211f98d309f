package slicemap

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// The fake client stands in for the apiserver only to inject the errors of a cluster that
// does not serve resource.k8s.io/v1 (the real apiserver case is test/integration/cli).
func TestFetchClaims(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), slicerv1alpha1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t1"}}
	gr := schema.GroupResource{Group: resourceapi.GroupName, Resource: "resourceclaims"}
	failing := func(err error) interceptor.Funcs {
		return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			switch list.(type) {
			case *resourceapi.ResourceClaimList, *resourceapi.ResourceClaimTemplateList:
				return err
			}
			return c.List(ctx, list, opts...)
		}}
	}
	cases := map[string]struct {
		funcs      interceptor.Funcs
		wantClaims int
		wantErr    string
	}{
		"served":                  {wantClaims: 1},
		"group not in discovery":  {funcs: failing(&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: resourceapi.GroupName, Kind: "ResourceClaim"}, SearchedVersions: []string{"v1"}})},
		"version answered 404":    {funcs: failing(apierrors.NewNotFound(gr, ""))},
		"forbidden is not hidden": {funcs: failing(apierrors.NewForbidden(gr, "", errors.New("no RBAC"))), wantErr: "list ResourceClaims"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(claim, tmpl).WithInterceptorFuncs(tc.funcs).
				WithIndex(&corev1.Event{}, "reason", func(o client.Object) []string { return []string{o.(*corev1.Event).Reason} }).Build()
			in, err := Fetch(context.Background(), c, "")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Fetch error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(in.ResourceClaims) != tc.wantClaims || len(in.ResourceClaimTemplates) != tc.wantClaims {
				t.Errorf("Fetch listed %d claims and %d templates, want %d each", len(in.ResourceClaims), len(in.ResourceClaimTemplates), tc.wantClaims)
			}
		})
	}
}
