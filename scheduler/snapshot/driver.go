package snapshot

import (
	"fmt"
	"slices"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// driverLacks is Node.Lacks for a NodeAccelerator: each profile of its GPUs' models that the
// node's driver (status.driverVersion) does not have (mig.Profile.SupportedBy, as the agent's
// realizer and the DRA pool decide it), with the reason Filter gives; nil when it lacks none.
// A node's GPUs share one driver, and a profile one of its models lacks is lacked by the node:
// a pod that asks for it could otherwise be placed on that model's GPU.
func driverLacks(na *slicerv1alpha1.NodeAccelerator) map[string]string {
	driver := na.Status.DriverVersion
	if driver == "" {
		return nil
	}
	var out map[string]string
	var seen []mig.Model
	for i := range na.Status.GPUs {
		m, err := mig.ParseModel(string(na.Status.GPUs[i].Model))
		if err != nil || slices.Contains(seen, m) {
			continue
		}
		seen = append(seen, m)
		for _, p := range m.Profiles() {
			if _, ok := out[p.Name]; ok || p.SupportedBy(driver) {
				continue
			}
			if out == nil {
				out = map[string]string{}
			}
			out[p.Name] = fmt.Sprintf("the node's NVIDIA driver %s has no MIG profile %s on %s: it needs R%d or later",
				driver, p.Name, m, p.MinDriver)
		}
	}
	return out
}

// sameModels reports whether two NodeAccelerators of a node list the same GPU models in order.
func sameModels(a, b *slicerv1alpha1.NodeAccelerator) bool {
	return slices.EqualFunc(a.Status.GPUs, b.Status.GPUs, func(x, y slicerv1alpha1.GPUStatus) bool { return x.Model == y.Model })
}
