package render

import (
	"testing"

	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// The Slicer's spec.defragmentation reaches the plugin's arguments in the scheduler's
// configuration.
func TestSchedulerConfigCarriesDefragmentation(t *testing.T) {
	cfg, err := SchedulerConfig(testOptions(func(s *slicerv1alpha1.Slicer) {
		s.Spec.Defragmentation = slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationDisabled, MaxMovesPerPlan: 3}
	}))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Profiles []struct {
			PluginConfig []struct {
				Name string
				Args struct {
					Defragmentation slicerv1alpha1.DefragmentationSpec `json:"defragmentation"`
				}
			} `json:"pluginConfig"`
		}
	}
	if err := yaml.Unmarshal(cfg, &doc); err != nil {
		t.Fatal(err)
	}
	for _, pc := range doc.Profiles[0].PluginConfig {
		if pc.Name == slicerv1alpha1.SchedulerPluginName {
			if got := pc.Args.Defragmentation; got.Mode != slicerv1alpha1.DefragmentationDisabled || got.MaxMovesPerPlan != 3 {
				t.Fatalf("plugin args defragmentation = %+v", got)
			}
			return
		}
	}
	t.Fatalf("no %s plugin config in\n%s", slicerv1alpha1.SchedulerPluginName, cfg)
}
