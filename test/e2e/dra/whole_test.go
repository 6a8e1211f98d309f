package dra

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

// gpuModeOf is the mode the node's NodeAccelerator reports for the GPU of that UUID.
func gpuModeOf(ctx SpecContext, uuid string) (slicerv1alpha1.GPUMode, error) {
	var na slicerv1alpha1.NodeAccelerator
	if err := k8s.Get(ctx, client.ObjectKey{Name: node}, &na); err != nil {
		return "", err
	}
	for _, g := range na.Status.GPUs {
		if g.UUID == uuid {
			return g.Mode, nil
		}
	}
	return "", fmt.Errorf("no GPU %s", uuid)
}

// expectWholeGPUs (issue 40): with the H100s' policy Dynamic, the pool publishes each GPU whole
// beside its MIG devices; a pod asking nvidia.com/gpu: 1 (the whole-GPU class's bridge, no
// claim) runs beside a 1g.10gb slice pod: the stock allocator gives it the GPU the slice is not
// on, the agent switches that GPU out of MIG mode in Prepare, and the container sees exactly
// that GPU (SLICER_GPU_UUID and NVIDIA_VISIBLE_DEVICES its UUID, no MIG device). Once both end,
// two 7g.80gb pods need both GPUs, so the whole one is switched back to MIG mode. The policies
// are removed at the end with both GPUs in MIG mode again.
func expectWholeGPUs(ctx SpecContext) {
	const ns = "e2e-dra-whole"
	createNamespace(ctx, ns)
	DeferCleanup(deleteNamespace, ns)
	localnode.SetGPUModes(ctx, k8s, node, []slicerv1alpha1.GPUModePolicy{{Model: slicerv1alpha1.GPUModel(mig.H100_80GB.String()), Mode: slicerv1alpha1.GPUModePolicyDynamic}})
	DeferCleanup(func(ctx SpecContext) { localnode.SetGPUModes(ctx, k8s, node, nil) })
	var class resourceapi.DeviceClass
	Expect(k8s.Get(ctx, client.ObjectKey{Name: migdra.WholeClassName}, &class)).To(Succeed())
	Expect(class.Spec.ExtendedResourceName).To(HaveValue(Equal(migapi.NVIDIAGPUResource)))
	Eventually(func(g Gomega) {
		devs, err := publishedDevices(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(devs).To(And(HaveKey(migdra.WholeGPUDeviceName(0)), HaveKey(migdra.WholeGPUDeviceName(1)), HaveKey("gpu-0-7g-80gb-at-0")))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	Expect(k8s.Create(ctx, bridgePod(ns, "slice", "1g.10gb", printDevice+waitForTerm))).To(Succeed())
	waitPhase(ctx, ns, corev1.PodRunning, "slice")
	expectPrepared(ctx, ns, "slice", "1g.10gb")
	sliceSaw, err := containerSaw(ctx, ns, "slice")
	Expect(err).NotTo(HaveOccurred())
	created := time.Now()
	whole := builder.Pod(ns, "whole").RestartNever().
		Container("main", builder.Limits(migapi.NVIDIAGPUResource, "1")).Shell(printDevice + waitForTerm).Obj()
	Expect(k8s.Create(ctx, whole)).To(Succeed())
	waitPhase(ctx, ns, corev1.PodRunning, "whole")
	GinkgoWriter.Printf("dra whole GPU: pod Running %s after creation (switch included)\n", time.Since(created).Round(10*time.Millisecond))
	var saw map[string]string
	Eventually(func() (err error) { saw, err = containerSaw(ctx, ns, "whole"); return err }).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	Expect(saw["device"]).To(BeEmpty(), "a whole GPU has no MIG device")
	Expect(saw["gpu"]).NotTo(Or(BeEmpty(), Equal(sliceSaw["gpu"])))
	Expect(saw["visible"]).To(Equal(saw["gpu"]))
	p, err := getPod(ctx, ns, "whole")
	Expect(err).NotTo(HaveOccurred())
	var c resourceapi.ResourceClaim
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimOfPod(p)}, &c)).To(Succeed())
	dev, err := allocatedDevice(&c)
	Expect(err).NotTo(HaveOccurred())
	_, isWhole := migdra.ParseWholeDeviceName(dev)
	Expect(isWhole).To(BeTrue(), "allocated %s", dev)
	spec, ok, err := (&cdi.Writer{Dir: cdiDir}).ReadClaimSpec(string(c.UID))
	Expect(err).NotTo(HaveOccurred())
	Expect(ok).To(BeTrue(), "no CDI spec for claim %s", c.Name)
	Expect(spec.Whole).To(ConsistOf(HaveField("UUID", saw["gpu"])))
	Expect(spec.Slices).To(BeEmpty())
	Expect(gpuModeOf(ctx, saw["gpu"])).To(Equal(slicerv1alpha1.GPUModeWhole))

	for _, n := range []string{"slice", "whole"} {
		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: builder.Pod(ns, n).Obj().ObjectMeta})).To(Succeed())
	}
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	for _, n := range []string{"train-a", "train-b"} {
		Expect(k8s.Create(ctx, bridgePod(ns, n, "7g.80gb", printDevice+waitForTerm))).To(Succeed())
	}
	waitPhase(ctx, ns, corev1.PodRunning, "train-a", "train-b")
	Eventually(func() (slicerv1alpha1.GPUMode, error) { return gpuModeOf(ctx, saw["gpu"]) }).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(slicerv1alpha1.GPUModeMIG))
	for _, n := range []string{"train-a", "train-b"} {
		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: builder.Pod(ns, n).Obj().ObjectMeta})).To(Succeed())
	}
	expectNothingPrepared(ctx, ns)
}
