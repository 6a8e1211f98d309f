package monitoring_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/prometheusrules"
)

// covers M2: the shipped CR itself is valid against the Prometheus-operator CRD.
var _ = Describe("PrometheusRule", func() {
	It("passes a strict server-side dry-run", func() {
		obj := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal(prometheusrules.PrometheusRule, &obj.Object)).To(Succeed())
		Expect(k8s.Create(ctx, obj, client.DryRunAll, client.FieldValidation("Strict"))).To(Succeed())
	})

	It("is rejected when a rule is malformed (the dry-run can fail)", func() {
		obj := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal(prometheusrules.PrometheusRule, &obj.Object)).To(Succeed())
		groups, _, err := unstructured.NestedSlice(obj.Object, "spec", "groups")
		Expect(err).NotTo(HaveOccurred())
		g := groups[0].(map[string]any)
		rules := g["rules"].([]any)
		rules[0].(map[string]any)["bogusField"] = "x"
		Expect(unstructured.SetNestedSlice(obj.Object, groups, "spec", "groups")).To(Succeed())
		err = k8s.Create(ctx, obj, client.DryRunAll, client.FieldValidation("Strict"))
		Expect(apierrors.IsBadRequest(err) || apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	})
})
