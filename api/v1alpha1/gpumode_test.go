package v1alpha1_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// GPUNodeSelector is written as a metav1.LabelSelector is: the same YAML must decode into both
// to the same selector, and LabelSelector must convert one into the other.
func TestGPUNodeSelectorReadsAsALabelSelector(t *testing.T) {
	for _, c := range []struct {
		name  string
		yaml  string
		match map[string]bool // node labels (k=v,...) -> whether the selector matches them
	}{
		{"empty selects every node", `{}`, map[string]bool{"": true, "a=b": true}},
		{"matchLabels", `{matchLabels: {pool: train, zone: a}}`,
			map[string]bool{"pool=train,zone=a": true, "pool=train": false, "pool=infer,zone=a": false}},
		{"In and DoesNotExist", `{matchExpressions: [{key: pool, operator: In, values: [train, batch]}, {key: drain, operator: DoesNotExist}]}`,
			map[string]bool{"pool=batch": true, "pool=train,drain=yes": false, "pool=infer": false, "": false}},
		{"NotIn and Exists with labels", `{matchLabels: {gpu: "true"}, matchExpressions: [{key: pool, operator: NotIn, values: [infer]}, {key: rack, operator: Exists}]}`,
			map[string]bool{"gpu=true,rack=r1": true, "gpu=true,rack=r1,pool=infer": false, "gpu=true": false, "rack=r1": false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ours := &slicerv1alpha1.GPUNodeSelector{}
			if err := yaml.UnmarshalStrict([]byte(c.yaml), ours); err != nil {
				t.Fatalf("decode as GPUNodeSelector: %v", err)
			}
			theirs := &metav1.LabelSelector{}
			if err := yaml.UnmarshalStrict([]byte(c.yaml), theirs); err != nil {
				t.Fatalf("decode as metav1.LabelSelector: %v", err)
			}
			converted := ours.LabelSelector()
			if diff := cmp.Diff(theirs, converted); diff != "" {
				t.Errorf("LabelSelector() differs from the metav1.LabelSelector the same YAML decodes to (-metav1 +converted):\n%s", diff)
			}
			selector, err := metav1.LabelSelectorAsSelector(converted)
			if err != nil {
				t.Fatalf("LabelSelectorAsSelector: %v", err)
			}
			for nodeLabels, want := range c.match {
				set, err := labels.ConvertSelectorToLabelsMap(nodeLabels)
				if err != nil {
					t.Fatalf("labels %q: %v", nodeLabels, err)
				}
				if got := selector.Matches(set); got != want {
					t.Errorf("selector %s on labels %q: matches %t, want %t", c.yaml, nodeLabels, got, want)
				}
			}
		})
	}
	if got := (*slicerv1alpha1.GPUNodeSelector)(nil).LabelSelector(); got != nil {
		t.Errorf("nil selector converts to %v, want nil", got)
	}
}

// LabelSelector's result shares nothing with the selector it came from.
func TestGPUNodeSelectorConversionCopies(t *testing.T) {
	ours := &slicerv1alpha1.GPUNodeSelector{
		MatchLabels:      map[string]string{"pool": "train"},
		MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a"}}},
	}
	converted := ours.LabelSelector()
	converted.MatchLabels["pool"] = "changed"
	converted.MatchExpressions[0].Values[0] = "changed"
	if ours.MatchLabels["pool"] != "train" || ours.MatchExpressions[0].Values[0] != "a" {
		t.Errorf("changing the converted selector changed the original: %+v", ours)
	}
}

// The Go bound and the enums of the GPU-mode API are written twice: as constants and as CRD
// markers. This keeps the two in step.
func TestGPUModesMatchCRD(t *testing.T) {
	slicers := loadCRD(t, "slicer.dev_slicers.yaml").Spec.Versions[0].Schema.OpenAPIV3Schema
	gpuModes := slicers.Properties["spec"].Properties["gpuModes"]
	if gpuModes.MaxItems == nil || *gpuModes.MaxItems != slicerv1alpha1.MaxGPUModePolicies {
		t.Errorf("spec.gpuModes maxItems %v, want MaxGPUModePolicies %d", gpuModes.MaxItems, slicerv1alpha1.MaxGPUModePolicies)
	}
	nodeAccelerators := loadCRD(t, "slicer.dev_nodeaccelerators.yaml").Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, c := range []struct {
		what string
		got  []string
		want []string
	}{
		{"spec.gpuModes[].mode", enumAt(t, *slicers, "spec", "gpuModes", "[]", "mode"), []string{
			string(slicerv1alpha1.GPUModePolicyDynamic), string(slicerv1alpha1.GPUModePolicyMIG), string(slicerv1alpha1.GPUModePolicyWhole)}},
		{"status.gpus[].mode", enumAt(t, *nodeAccelerators, "status", "gpus", "[]", "mode"), []string{
			string(slicerv1alpha1.GPUModeWhole), string(slicerv1alpha1.GPUModeMIG), string(slicerv1alpha1.GPUModeSwitching)}},
		{"status.gpus[].modeSwitch.phase", enumAt(t, *nodeAccelerators, "status", "gpus", "[]", "modeSwitch", "phase"), []string{
			string(slicerv1alpha1.GPUModeSwitchPending), string(slicerv1alpha1.GPUModeSwitchFailed)}},
		{"status.gpus[].modeSwitch.reason", enumAt(t, *nodeAccelerators, "status", "gpus", "[]", "modeSwitch", "reason"), []string{
			string(slicerv1alpha1.GPUModeSwitchHeldByClient), string(slicerv1alpha1.GPUModeSwitchResetRequired),
			string(slicerv1alpha1.GPUModeSwitchResetNotAllowed), string(slicerv1alpha1.GPUModeSwitchInstancesPresent),
			string(slicerv1alpha1.GPUModeSwitchNVMLError)}},
		{"spec.gpuModes[].model (the models of status.gpus[].model)", enumAt(t, *slicers, "spec", "gpuModes", "[]", "model"),
			enumAt(t, *nodeAccelerators, "status", "gpus", "[]", "model")},
		{"spec.gpuModes[].nodeSelector.matchExpressions[].operator",
			enumAt(t, *slicers, "spec", "gpuModes", "[]", "nodeSelector", "matchExpressions", "[]", "operator"), []string{
				string(metav1.LabelSelectorOpIn), string(metav1.LabelSelectorOpNotIn), string(metav1.LabelSelectorOpExists), string(metav1.LabelSelectorOpDoesNotExist)}},
	} {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s: the CRD's enum differs from the Go constants (-go +crd):\n%s", c.what, diff)
		}
	}
}
