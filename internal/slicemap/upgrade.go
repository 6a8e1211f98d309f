package slicemap

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// DriverUpgrade is where a node is in a rolling driver upgrade (docs/driver-upgrade.md): the
// operator's slicer.dev/driver-upgrade label and slicer.dev/driver-upgrade-since annotation.
// While it is set the node takes no new MIG pod.
type DriverUpgrade struct {
	Step  string    `json:"step"`
	Since time.Time `json:"since,omitzero"`
}

// upgradesOf reads the driver upgrade of the nodes that carry one.
func upgradesOf(nodes []corev1.Node) map[string]*DriverUpgrade {
	out := map[string]*DriverUpgrade{}
	for i := range nodes {
		n := &nodes[i]
		step := n.Labels[slicerv1alpha1.LabelDriverUpgrade]
		if step == "" {
			continue
		}
		u := &DriverUpgrade{Step: step}
		if t, err := time.Parse(time.RFC3339, n.Annotations[slicerv1alpha1.AnnotationDriverUpgradeSince]); err == nil {
			u.Since = t
		}
		out[n.Name] = u
	}
	return out
}

// upgradeText is the node header's note on its driver upgrade ("" when none).
func upgradeText(u *DriverUpgrade) string {
	if u == nil {
		return ""
	}
	s := "  DRIVER UPGRADE: " + u.Step
	if !u.Since.IsZero() {
		s += " since " + u.Since.UTC().Format(time.RFC3339)
	}
	return s + " (no new MIG pods)"
}
