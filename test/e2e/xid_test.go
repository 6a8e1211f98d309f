package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

// gpuHealth is the health the node's NodeAccelerator reports for the GPU with that UUID.
func gpuHealth(ctx SpecContext, uuid string) (slicerv1alpha1.GPUHealth, error) {
	var na slicerv1alpha1.NodeAccelerator
	if err := k8s.Get(ctx, client.ObjectKey{Name: node}, &na); err != nil {
		return "", err
	}
	for _, g := range na.Status.GPUs {
		if g.UUID == uuid {
			return g.Health, nil
		}
	}
	return "", nil
}

// allocationGPU is the GPU UUID of the pod's one allocation.
func allocationGPU(ctx SpecContext, ns, pod string) string {
	for _, a := range allocationsIn(ctx, ns) {
		if a.Spec.PodName == pod {
			return a.Spec.GPUUUID
		}
	}
	Fail("no allocation for pod " + pod)
	return ""
}

// expectXIDTakesTheGPUOut (issue 41 item 6, device-plugin frontend): an XID that breaks the
// GPU of a running 7g.80gb pod (injected through the emulated NVML's control file on the node)
// makes the NodeAccelerator report the GPU unhealthy and tells the pod; Slicer's scheduler
// places the next 7g.80gb pod on the other H100; the pod that had it keeps running. Once it is
// gone and the GPU is reset, the GPU is healthy again and the next pod gets it.
func expectXIDTakesTheGPUOut(ctx SpecContext) {
	const ns = "e2e-xid"
	createNamespace(ctx, ns)
	DeferCleanup(deleteNamespace, ns)
	currentGroup = "after an XID"
	start := time.Now()
	createPod(ctx, slicePod(ns, "before", "7g.80gb"))
	waitRunning(ctx, ns, "before")
	broken := allocationGPU(ctx, ns, "before")
	index := localnode.EmulatedGPUIndex(node, broken)

	localnode.BreakGPU(emulatedStateFile, index)
	Eventually(func(g Gomega) {
		h, err := gpuHealth(ctx, broken)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(h).To(Equal(slicerv1alpha1.GPUUnhealthy))
		var evs corev1.EventList
		g.Expect(k8s.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
		told := false
		for _, e := range evs.Items {
			told = told || (e.InvolvedObject.Name == "before" && e.Reason == slicerv1alpha1.ReasonGPUUnhealthy)
		}
		g.Expect(told).To(BeTrue(), "the pod on the broken GPU got a %s Event", slicerv1alpha1.ReasonGPUUnhealthy)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	GinkgoWriter.Printf("e2e: XID → GPU reported unhealthy in %s\n", time.Since(start).Round(time.Millisecond))

	createPod(ctx, slicePod(ns, "next", "7g.80gb"))
	waitRunning(ctx, ns, "next")
	Expect(allocationGPU(ctx, ns, "next")).NotTo(Equal(broken), "the next pod went to the healthy H100")
	Expect(podPhase(ctx, ns, "before")).To(Equal(corev1.PodRunning), "nothing is evicted")

	// The pod on the broken GPU goes, the GPU is reset: it takes pods again.
	Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: objectMeta(ns, "before")})).To(Succeed())
	Eventually(podPhase).WithContext(ctx).WithArguments(ns, "before").WithTimeout(2 * time.Minute).Should(BeEmpty())
	localnode.ResetGPU(emulatedStateFile, index)
	Eventually(gpuHealth).WithContext(ctx).WithArguments(broken).WithTimeout(time.Minute).Should(Equal(slicerv1alpha1.GPUHealthy))
	createPod(ctx, slicePod(ns, "after", "7g.80gb"))
	waitRunning(ctx, ns, "after")
	Expect(allocationGPU(ctx, ns, "after")).To(Equal(broken), "the reset GPU takes the next pod")
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	GinkgoWriter.Printf("e2e: XID spec in %s\n", time.Since(start).Round(time.Second))
}
