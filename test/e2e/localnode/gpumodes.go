package localnode

import (
	"context"
	"slices"
	"time"

	"github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// SetGPUModes sets the Slicer's spec.gpuModes and waits for the agent of node to apply them:
// it reports the policy of each GPU a policy selects (modePolicy), MIG for the others, and
// none once there are none. Both suites (the device-plugin and the DRA frontend) call it.
func SetGPUModes(ctx context.Context, k8s client.Client, node string, policies []slicerv1alpha1.GPUModePolicy) {
	var s slicerv1alpha1.Slicer
	gomega.Expect(k8s.Get(ctx, client.ObjectKey{Name: "default"}, &s)).To(gomega.Succeed())
	s.Spec.GPUModes = policies
	gomega.Expect(k8s.Update(ctx, &s)).To(gomega.Succeed())
	gomega.Eventually(func(g gomega.Gomega) {
		var na slicerv1alpha1.NodeAccelerator
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, &na)).To(gomega.Succeed())
		for _, gs := range na.Status.GPUs {
			var want slicerv1alpha1.GPUModePolicyMode
			if i := slices.IndexFunc(policies, func(p slicerv1alpha1.GPUModePolicy) bool { return p.Model == gs.Model }); i >= 0 {
				want = policies[i].Mode
			} else if len(policies) > 0 {
				want = slicerv1alpha1.GPUModePolicyMIG // no policy selects it: it stays in MIG mode
			}
			g.Expect(gs.ModePolicy).To(gomega.Equal(want), "GPU %d (%s)", gs.Index, gs.Model)
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(gomega.Succeed())
}
