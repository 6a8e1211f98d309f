package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// statusValidator checks a NodeAccelerator as the apiserver does on a write, without one:
// the OpenAPI schema of the generated CRD (types, enums, bounds, required fields) and its CEL
// rules (x-kubernetes-validations), with the apiserver's own validators
// (k8s.io/apiextensions-apiserver/pkg/registry/customresource/strategy.go calls the same).
type statusValidator struct {
	openAPI    validation.SchemaValidator
	structural *schema.Structural
	cel        *cel.Validator
}

func newStatusValidator(t *testing.T) *statusValidator {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "slicer.dev_nodeaccelerators.yaml"))
	if err != nil {
		t.Fatalf("read CRD: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatalf("parse CRD: %v", err)
	}
	var v1 *apiextensionsv1.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == slicerv1alpha1.GroupVersion.Version && v.Schema != nil {
			v1 = v.Schema.OpenAPIV3Schema
		}
	}
	if v1 == nil {
		t.Fatalf("CRD has no schema for %s", slicerv1alpha1.GroupVersion.Version)
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v1, internal, nil); err != nil {
		t.Fatalf("convert schema: %v", err)
	}
	structural, err := schema.NewStructural(internal)
	if err != nil {
		t.Fatalf("structural schema: %v", err)
	}
	openAPI, _, err := validation.NewSchemaValidator(internal)
	if err != nil {
		t.Fatalf("schema validator: %v", err)
	}
	return &statusValidator{openAPI: openAPI, structural: structural, cel: cel.NewValidator(structural, true, celconfig.PerCallLimit)}
}

// errors is what the apiserver would refuse in a NodeAccelerator with status st.
func (v *statusValidator) errors(t *testing.T, st slicerv1alpha1.NodeAcceleratorStatus) field.ErrorList {
	t.Helper()
	na := &slicerv1alpha1.NodeAccelerator{
		TypeMeta:   metav1.TypeMeta{APIVersion: slicerv1alpha1.GroupVersion.String(), Kind: "NodeAccelerator"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec:       slicerv1alpha1.NodeAcceleratorSpec{NodeName: "node-1"},
		Status:     st,
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(na)
	if err != nil {
		t.Fatalf("to unstructured: %v", err)
	}
	errs := validation.ValidateCustomResource(nil, obj, v.openAPI)
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}
