package v1alpha1_test

import (
	"strconv"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// The CRD's defaults and bounds of spec.defragmentation are markers; Go code applies the same
// values (the constants, internal/mig's move bounds). This test keeps them in step.
func TestDefragmentationDefaultsMatchCRD(t *testing.T) {
	crd := loadCRD(t, "slicer.dev_slicers.yaml")
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["defragmentation"]
	field := func(name string) apiextensionsv1.JSONSchemaProps {
		f, ok := spec.Properties[name]
		if !ok {
			t.Fatalf("no spec.defragmentation.%s in the CRD", name)
		}
		return f
	}
	def := func(name string) string {
		f := field(name)
		if f.Default == nil {
			t.Fatalf("spec.defragmentation.%s has no default", name)
		}
		return string(f.Default.Raw)
	}
	for _, c := range []struct{ name, got, want string }{
		{"mode", def("mode"), strconv.Quote(string(slicerv1alpha1.DefaultDefragmentationMode))},
		{"maxMovesPerPlan", def("maxMovesPerPlan"), strconv.Itoa(mig.DefaultDefragMoves)},
		{"maxEvictions", def("maxEvictions"), strconv.Itoa(slicerv1alpha1.DefaultMaxEvictions)},
		{"windowSeconds", def("windowSeconds"), strconv.Itoa(slicerv1alpha1.DefaultEvictionWindowSeconds)},
	} {
		if c.got != c.want {
			t.Errorf("spec.defragmentation.%s defaults to %s in the CRD, %s in Go", c.name, c.got, c.want)
		}
	}
	if max := field("maxMovesPerPlan").Maximum; max == nil || int(*max) != mig.MaxDefragMoves {
		t.Errorf("spec.defragmentation.maxMovesPerPlan maximum %v, want mig.MaxDefragMoves %d", max, mig.MaxDefragMoves)
	}
}
