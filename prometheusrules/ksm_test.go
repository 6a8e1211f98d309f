package prometheusrules

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/framework"
)

func TestKubeStateMetricsNames(t *testing.T) {
	got, err := KubeStateMetrics()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range got {
		names = append(names, n)
		if got[n] == "" {
			t.Errorf("%s has no help", n)
		}
	}
	want := []string{"kube_slicer_nodeaccelerator_status_condition", "kube_slicer_sliceallocation_status_state"}
	if diff := cmp.Diff(want, sortedStrings(names)); diff != "" {
		t.Errorf("metric names (-want +got):\n%s", diff)
	}
}

// The configuration must name kinds Slicer serves, or kube-state-metrics
// silently exports nothing.
func TestKubeStateMetricsKindsExist(t *testing.T) {
	var c ksmConfig
	if err := yaml.Unmarshal(KubeStateMetricsConfig, &c); err != nil {
		t.Fatal(err)
	}
	scheme := framework.NewScheme()
	for _, r := range c.Spec.Resources {
		gvk := slicerv1alpha1.GroupVersion.WithKind(r.GroupVersionKind.Kind)
		if r.GroupVersionKind.Group != gvk.Group || r.GroupVersionKind.Version != gvk.Version || !scheme.Recognizes(gvk) {
			t.Errorf("resource %+v is not a slicer.dev/v1alpha1 kind", r.GroupVersionKind)
		}
	}
	if len(c.Spec.Resources) == 0 {
		t.Error("no resources")
	}
}

func sortedStrings(s []string) []string {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return sortedKeys(m)
}
