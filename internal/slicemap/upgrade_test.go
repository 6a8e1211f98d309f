package slicemap

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// A node under a driver upgrade says so in the map (issue 42), with its step and since when;
// the other nodes say nothing of it.
func TestDriverUpgradeShown(t *testing.T) {
	in := sampleInput()
	in.UpgradingNodes = []corev1.Node{{ObjectMeta: metav1.ObjectMeta{
		Name:        "gpu-node-2",
		Labels:      map[string]string{slicerv1alpha1.LabelDriverUpgrade: string(slicerv1alpha1.DriverUpgradeDrain)},
		Annotations: map[string]string{slicerv1alpha1.AnnotationDriverUpgradeSince: "2026-12-01T12:00:00Z"},
	}}}
	m := Build(in, Options{})
	var b bytes.Buffer
	if err := WriteText(&b, m); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	if !strings.Contains(text, "NODE gpu-node-2  driver ") || !strings.Contains(text, "  DRIVER UPGRADE: Drain since 2026-12-01T12:00:00Z (no new MIG pods)\n") {
		t.Errorf("gpu-node-2's header does not show its upgrade:\n%s", text)
	}
	if strings.Count(text, "DRIVER UPGRADE") != 1 {
		t.Errorf("the upgrade is shown on other nodes too:\n%s", text)
	}
	for _, n := range m.Nodes {
		if (n.DriverUpgrade != nil) != (n.Name == "gpu-node-2") {
			t.Errorf("node %s: driverUpgrade %+v", n.Name, n.DriverUpgrade)
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"driverUpgrade": {`) || !strings.Contains(js.String(), `"step": "Drain"`) {
		t.Errorf("JSON lacks the upgrade:\n%s", js.String())
	}
}
