package v1alpha1_test

import (
	"context"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
)

// The kube-apiserver refuses a CRD whose CEL rules it cannot compile or whose estimated cost
// exceeds its budget (per rule and per CRD). This runs the apiserver's own CRD validation
// (k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation) on the generated CRDs, so
// a rule over an unbounded list fails here, without a control plane.
func TestCRDsPassTheAPIServersValidation(t *testing.T) {
	for _, file := range []string{"slicer.dev_slicers.yaml", "slicer.dev_nodeaccelerators.yaml", "slicer.dev_sliceallocations.yaml"} {
		t.Run(file, func(t *testing.T) {
			crd := loadCRD(t, file)
			internal := &apiextensions.CustomResourceDefinition{}
			if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
				t.Fatalf("convert: %v", err)
			}
			// The apiserver sets storedVersions on create; the validation wants one.
			for _, v := range internal.Spec.Versions {
				if v.Storage {
					internal.Status.StoredVersions = append(internal.Status.StoredVersions, v.Name)
				}
			}
			for _, err := range validation.ValidateCustomResourceDefinition(context.Background(), internal) {
				t.Errorf("%v", err)
			}
		})
	}
}
