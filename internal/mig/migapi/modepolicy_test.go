package migapi

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func TestModePolicyFor(t *testing.T) {
	const (
		h100 slicerv1alpha1.GPUModel = "H100-80GB"
		a100 slicerv1alpha1.GPUModel = "A100-80GB"
	)
	dynamic, mig, whole := slicerv1alpha1.GPUModePolicyDynamic, slicerv1alpha1.GPUModePolicyMIG, slicerv1alpha1.GPUModePolicyWhole
	expr := func(key string, op metav1.LabelSelectorOperator, values ...string) *slicerv1alpha1.GPUNodeSelector {
		return &slicerv1alpha1.GPUNodeSelector{MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	pool := func(v string) *slicerv1alpha1.GPUNodeSelector {
		return &slicerv1alpha1.GPUNodeSelector{MatchLabels: map[string]string{"pool": v}}
	}
	train := map[string]string{"pool": "train"}
	serve := map[string]string{"pool": "serve", "maintenance": "yes"}
	none := ModePolicy{Mode: mig, Index: NoModePolicy}
	at := func(i int, m slicerv1alpha1.GPUModePolicyMode, reset bool) ModePolicy {
		return ModePolicy{Mode: m, AllowReset: reset, Index: i}
	}
	// The example of docs/gpu-modes.md.
	example := []slicerv1alpha1.GPUModePolicy{
		{Model: h100, NodeSelector: pool("train"), Mode: whole},
		{Model: h100, Mode: dynamic},
		{Model: a100, NodeSelector: expr("maintenance", metav1.LabelSelectorOpDoesNotExist), Mode: dynamic, AllowReset: true},
	}
	cases := []struct {
		name     string
		policies []slicerv1alpha1.GPUModePolicy
		model    slicerv1alpha1.GPUModel
		labels   map[string]string
		want     ModePolicy
	}{
		{"no policies", nil, h100, train, none},
		{"empty list", []slicerv1alpha1.GPUModePolicy{}, a100, nil, none},
		{"no MIG model", example, "", train, ModePolicy{Mode: whole, Index: NoModePolicy, NotMIGCapable: true}},
		{"no MIG model, no policies", nil, "", nil, ModePolicy{Mode: whole, Index: NoModePolicy, NotMIGCapable: true}},
		{"unknown model", example, "T4-16GB", train, ModePolicy{Mode: whole, Index: NoModePolicy, NotMIGCapable: true}},

		{"example: model and selector", example, h100, train, at(0, whole, false)},
		{"example: first fails its selector, second by model", example, h100, serve, at(1, dynamic, false)},
		{"example: no labels, second by model", example, h100, nil, at(1, dynamic, false)},
		{"example: DoesNotExist matches", example, a100, train, at(2, dynamic, true)},
		{"example: DoesNotExist fails, none", example, a100, serve, none},
		{"example: no policy for the model", example, "A30-24GB", train, none},

		{"first match wins over a later one", []slicerv1alpha1.GPUModePolicy{
			{Model: h100, Mode: mig}, {Model: h100, NodeSelector: pool("train"), Mode: whole},
		}, h100, train, at(0, mig, false)},
		{"a broad selector first wins", []slicerv1alpha1.GPUModePolicy{
			{NodeSelector: &slicerv1alpha1.GPUNodeSelector{}, Mode: whole}, {Model: h100, Mode: dynamic},
		}, h100, nil, at(0, whole, false)},
		{"model only, other model skipped", []slicerv1alpha1.GPUModePolicy{
			{Model: a100, Mode: whole}, {Model: h100, Mode: dynamic, AllowReset: true},
		}, h100, nil, at(1, dynamic, true)},
		{"selector only, any model", []slicerv1alpha1.GPUModePolicy{{NodeSelector: pool("train"), Mode: whole}}, a100, train, at(0, whole, false)},
		{"selector only, no match", []slicerv1alpha1.GPUModePolicy{{NodeSelector: pool("train"), Mode: whole}}, a100, serve, none},
		{"model and selector: model fails", []slicerv1alpha1.GPUModePolicy{{Model: a100, NodeSelector: pool("train"), Mode: whole}}, h100, train, none},
		{"model and selector: selector fails", []slicerv1alpha1.GPUModePolicy{{Model: a100, NodeSelector: pool("train"), Mode: whole}}, a100, serve, none},
		{"matchLabels and matchExpressions both needed", []slicerv1alpha1.GPUModePolicy{{NodeSelector: &slicerv1alpha1.GPUNodeSelector{
			MatchLabels:      map[string]string{"pool": "serve"},
			MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{{Key: "maintenance", Operator: metav1.LabelSelectorOpDoesNotExist}},
		}, Mode: whole}}, h100, serve, none},

		{"In matches", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("pool", metav1.LabelSelectorOpIn, "serve", "train"), Mode: whole}}, h100, train, at(0, whole, false)},
		{"In fails", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("pool", metav1.LabelSelectorOpIn, "serve"), Mode: whole}}, h100, train, none},
		{"In fails without the label", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("pool", metav1.LabelSelectorOpIn, "serve"), Mode: whole}}, h100, nil, none},
		{"NotIn matches", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("pool", metav1.LabelSelectorOpNotIn, "serve"), Mode: whole}}, h100, train, at(0, whole, false)},
		{"NotIn matches without the label", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("pool", metav1.LabelSelectorOpNotIn, "serve"), Mode: whole}}, h100, nil, at(0, whole, false)},
		{"NotIn fails", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("pool", metav1.LabelSelectorOpNotIn, "serve"), Mode: whole}}, h100, serve, none},
		{"Exists matches", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("maintenance", metav1.LabelSelectorOpExists), Mode: whole}}, h100, serve, at(0, whole, false)},
		{"Exists fails", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("maintenance", metav1.LabelSelectorOpExists), Mode: whole}}, h100, train, none},
		{"DoesNotExist fails", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("pool", metav1.LabelSelectorOpDoesNotExist), Mode: whole}}, h100, train, none},
		{"DoesNotExist matches", []slicerv1alpha1.GPUModePolicy{{NodeSelector: expr("pool", metav1.LabelSelectorOpDoesNotExist), Mode: whole}}, h100, nil, at(0, whole, false)},
		{"allowReset read only with Dynamic", []slicerv1alpha1.GPUModePolicy{{Model: h100, Mode: whole, AllowReset: true}}, h100, nil, at(0, whole, false)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ModePolicyFor(tc.policies, tc.model, tc.labels)
			if err != nil {
				t.Fatalf("ModePolicyFor: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ModePolicyFor (-want +got):\n%s", diff)
			}
		})
	}
}

func TestModePolicyForBadSelector(t *testing.T) {
	policies := []slicerv1alpha1.GPUModePolicy{
		{NodeSelector: &slicerv1alpha1.GPUNodeSelector{MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{{Key: "pool", Operator: "Near"}}}, Mode: slicerv1alpha1.GPUModePolicyWhole},
		{Model: "H100-80GB", Mode: slicerv1alpha1.GPUModePolicyDynamic},
	}
	if got, err := ModePolicyFor(policies, "H100-80GB", nil); err == nil {
		t.Errorf("ModePolicyFor with operator Near = %+v, want an error", got)
	}
	// A GPU of no MIG model is whole whatever the policies say.
	if got, err := ModePolicyFor(policies, "", nil); err != nil || got.Mode != slicerv1alpha1.GPUModePolicyWhole {
		t.Errorf("ModePolicyFor of a GPU without MIG = %+v, %v, want Whole", got, err)
	}
}

func TestGPUModesFlag(t *testing.T) {
	policies := []slicerv1alpha1.GPUModePolicy{
		{Model: "H100-80GB", NodeSelector: &slicerv1alpha1.GPUNodeSelector{MatchLabels: map[string]string{"pool": "train"}}, Mode: slicerv1alpha1.GPUModePolicyWhole},
		{Model: "A100-80GB", NodeSelector: &slicerv1alpha1.GPUNodeSelector{MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{
			{Key: "maintenance", Operator: metav1.LabelSelectorOpDoesNotExist},
		}}, Mode: slicerv1alpha1.GPUModePolicyDynamic, AllowReset: true},
	}
	s, err := GPUModesFlag(policies)
	if err != nil {
		t.Fatal(err)
	}
	const want = `[{"model":"H100-80GB","nodeSelector":{"matchLabels":{"pool":"train"}},"mode":"Whole"},` +
		`{"model":"A100-80GB","nodeSelector":{"matchExpressions":[{"key":"maintenance","operator":"DoesNotExist"}]},"mode":"Dynamic","allowReset":true}]`
	if s != want {
		t.Errorf("GPUModesFlag =\n%s\nwant\n%s", s, want)
	}
	back, err := ParseGPUModesFlag(s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(policies, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for _, empty := range [][]slicerv1alpha1.GPUModePolicy{nil, {}} {
		if s, err := GPUModesFlag(empty); s != "" || err != nil {
			t.Errorf("GPUModesFlag(%v) = %q, %v, want \"\"", empty, s, err)
		}
	}
	if p, err := ParseGPUModesFlag(""); p != nil || err != nil {
		t.Errorf(`ParseGPUModesFlag("") = %v, %v`, p, err)
	}
}

func TestParseGPUModesFlagRefuses(t *testing.T) {
	nine := "[" + strings.Repeat(`{"model":"H100-80GB","mode":"MIG"},`, 8) + `{"model":"H100-80GB","mode":"MIG"}]`
	for flag, words := range map[string]string{
		`{"model":"H100-80GB","mode":"MIG"}`:                                                   "not a JSON list",
		`[{"model":"H100-80GB","mode":"MIG"}] x`:                                               "text after the list",
		`[{"model":"H100-80GB","mode":"MIG","reset":true}]`:                                    "unknown field",
		`[{"model":"H100-80GB","mode":"Off"}]`:                                                 `mode "Off"`,
		`[{"model":"T4-16GB","mode":"MIG"}]`:                                                   "unknown GPU model",
		`[{"mode":"Whole"}]`:                                                                   "selects no GPU",
		`[{"model":"A100-80GB","mode":"MIG","allowReset":true}]`:                               "allowReset applies only to mode Dynamic",
		`[{"nodeSelector":{"matchExpressions":[{"key":"a","operator":"Near"}]},"mode":"MIG"}]`: "nodeSelector",
		nine: "9 policies, at most 8",
	} {
		_, err := ParseGPUModesFlag(flag)
		if err == nil || !strings.Contains(err.Error(), words) {
			t.Errorf("ParseGPUModesFlag(%s) = %v, want an error with %q", flag, err, words)
		}
	}
}
