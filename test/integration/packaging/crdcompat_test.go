package packaging_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/test/framework"
)

// breaking lists the non-additive differences from old to cur: a removed
// version or field, a changed type, a new required field or a removed enum
// value.
func breaking(old, cur *apiextensionsv1.CustomResourceDefinition) []string {
	var out []string
	for _, ov := range old.Spec.Versions {
		i := slices.IndexFunc(cur.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == ov.Name })
		if i < 0 {
			out = append(out, "version "+ov.Name+" removed")
			continue
		}
		if ov.Schema == nil || cur.Spec.Versions[i].Schema == nil {
			continue
		}
		out = append(out, schemaDiff(ov.Name, ov.Schema.OpenAPIV3Schema, cur.Spec.Versions[i].Schema.OpenAPIV3Schema)...)
	}
	return out
}

func schemaDiff(path string, old, cur *apiextensionsv1.JSONSchemaProps) []string {
	if old == nil {
		return nil
	}
	if cur == nil {
		return []string{path + " removed"}
	}
	var out []string
	if old.Type != cur.Type {
		out = append(out, fmt.Sprintf("%s type %q -> %q", path, old.Type, cur.Type))
	}
	for _, r := range cur.Required {
		if !slices.Contains(old.Required, r) {
			out = append(out, path+"."+r+" became required")
		}
	}
	if len(old.Enum) > 0 {
		for _, e := range old.Enum {
			if !slices.ContainsFunc(cur.Enum, func(c apiextensionsv1.JSON) bool { return string(c.Raw) == string(e.Raw) }) && len(cur.Enum) > 0 {
				out = append(out, fmt.Sprintf("%s enum value %s removed", path, e.Raw))
			}
		}
	}
	for name, op := range old.Properties {
		var cp *apiextensionsv1.JSONSchemaProps
		if c, ok := cur.Properties[name]; ok {
			cp = &c
		}
		out = append(out, schemaDiff(path+"."+name, &op, cp)...)
	}
	if old.Items != nil && old.Items.Schema != nil {
		var ci *apiextensionsv1.JSONSchemaProps
		if cur.Items != nil {
			ci = cur.Items.Schema
		}
		out = append(out, schemaDiff(path+"[]", old.Items.Schema, ci)...)
	}
	return out
}

func loadCRD(path string) *apiextensionsv1.CustomResourceDefinition {
	raw, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	Expect(yaml.Unmarshal(raw, crd)).To(Succeed())
	return crd
}

var _ = Describe("CRD upgrades", func() {
	It("keeps the CRDs additive against every released schema", func() {
		released, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "hack", "bundle", "released", "*", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(released).NotTo(BeEmpty())
		for _, p := range released {
			cur := filepath.Join(framework.RepoRoot(), "config", "crd", "bases", filepath.Base(p))
			Expect(cur).To(BeAnExistingFile(), "released CRD %s was removed", p)
			Expect(breaking(loadCRD(p), loadCRD(cur))).To(BeEmpty(), "%s", p)
		}
	})

	It("reports removed fields, type changes, new required fields and removed enum values", func() {
		old := loadCRD(filepath.Join(framework.RepoRoot(), "config", "crd", "bases", "slicer.dev_slicers.yaml"))
		cur := old.DeepCopy()
		spec := cur.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		delete(spec.Properties, "network")
		sched := spec.Properties["scheduler"]
		replicas := sched.Properties["replicas"]
		replicas.Type = "string"
		sched.Properties["replicas"] = replicas
		sched.Required = append(sched.Required, "name")
		spec.Properties["scheduler"] = sched
		driver := spec.Properties["driver"]
		mode := driver.Properties["mode"]
		mode.Enum = mode.Enum[:1]
		driver.Properties["mode"] = mode
		spec.Properties["driver"] = driver
		cur.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		Expect(breaking(old, cur)).To(ConsistOf(
			"v1alpha1.spec.network removed",
			`v1alpha1.spec.scheduler.replicas type "integer" -> "string"`,
			"v1alpha1.spec.scheduler.name became required",
			MatchRegexp(`^v1alpha1\.spec\.driver\.mode enum value "\w+" removed$`),
			MatchRegexp(`^v1alpha1\.spec\.driver\.mode enum value "\w+" removed$`),
		))
	})
})
