package dra

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/dra"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

// gpuTainted reports, for GPU index i of the node's pool, whether every published device has
// the unhealthy taint (all) or none has (none).
func gpuTainted(ctx SpecContext, i int) (all, none bool, err error) {
	var list resourceapi.ResourceSliceList
	if err := k8s.List(ctx, &list); err != nil {
		return false, false, err
	}
	all, none = true, true
	for _, s := range list.Items {
		if s.Spec.Driver != migdra.DriverName || s.Spec.Pool.Name != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			ref, err := migdra.ParseDeviceName(d.Name)
			if err != nil || ref.GPU != i {
				continue
			}
			tainted := false
			for _, t := range d.Taints {
				tainted = tainted || (t.Key == dra.TaintUnhealthy && t.Effect == resourceapi.DeviceTaintEffectNoSchedule)
			}
			all, none = all && tainted, none && !tainted
		}
	}
	return all, none, nil
}

// expectXIDTakesTheGPUOut (issue 41 item 6, DRA frontend): an XID that breaks the GPU of a
// running 7g.80gb pod (injected through the emulated NVML's control file on the node) taints
// every device of that GPU in the node's ResourceSlices and tells the pod; the next 7g.80gb
// pod goes to the other H100; the pod that had it keeps running. Once it is gone and the GPU
// is reset, the devices are published untainted again and the next pod gets them.
func expectXIDTakesTheGPUOut(ctx SpecContext) {
	const ns = "e2e-dra-xid"
	createNamespace(ctx, ns)
	DeferCleanup(func(ctx SpecContext) {
		deleteNamespace(ctx, ns)
		expectNothingPrepared(ctx, ns)
	})
	start := time.Now()
	Expect(k8s.Create(ctx, bridgePod(ns, "before", "7g.80gb", printDevice+waitForTerm))).To(Succeed())
	waitPhase(ctx, ns, corev1.PodRunning, "before")
	expectPrepared(ctx, ns, "before", "7g.80gb")
	saw, err := containerSaw(ctx, ns, "before")
	Expect(err).NotTo(HaveOccurred())
	broken := localnode.EmulatedGPUIndex(node, saw["gpu"])

	localnode.BreakGPU(emulatedStateFile, broken)
	Eventually(func(g Gomega) {
		all, _, err := gpuTainted(ctx, broken)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(all).To(BeTrue(), "GPU %d's devices are tainted", broken)
		_, none, err := gpuTainted(ctx, 1-broken)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(none).To(BeTrue(), "the other GPU's devices are not")
		var evs eventsv1.EventList
		g.Expect(k8s.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
		told := false
		for _, e := range evs.Items {
			told = told || (e.Regarding.Name == "before" && e.Reason == slicerv1alpha1.ReasonGPUUnhealthy)
		}
		g.Expect(told).To(BeTrue(), "the pod on the broken GPU got a %s Event", slicerv1alpha1.ReasonGPUUnhealthy)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	GinkgoWriter.Printf("dra: XID → devices tainted in %s\n", time.Since(start).Round(time.Millisecond))

	Expect(k8s.Create(ctx, bridgePod(ns, "next", "7g.80gb", printDevice+waitForTerm))).To(Succeed())
	waitPhase(ctx, ns, corev1.PodRunning, "next")
	expectPrepared(ctx, ns, "next", "7g.80gb")
	saw, err = containerSaw(ctx, ns, "next")
	Expect(err).NotTo(HaveOccurred())
	Expect(localnode.EmulatedGPUIndex(node, saw["gpu"])).To(Equal(1-broken), "the next pod went to the healthy GPU")
	Expect(podPhaseOf(ctx, ns, "before")).To(Equal(corev1.PodRunning), "nothing is evicted")

	// The pod on the broken GPU goes, the GPU is reset: its devices come back.
	deleteNamedPod(ctx, ns, "before")
	localnode.ResetGPU(emulatedStateFile, broken)
	Eventually(func() (bool, error) {
		_, none, err := gpuTainted(ctx, broken)
		return none, err
	}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "GPU %d untainted after the reset", broken)
	Expect(k8s.Create(ctx, bridgePod(ns, "after", "7g.80gb", printDevice+waitForTerm))).To(Succeed())
	waitPhase(ctx, ns, corev1.PodRunning, "after")
	expectPrepared(ctx, ns, "after", "7g.80gb")
	GinkgoWriter.Printf("dra: XID spec in %s\n", time.Since(start).Round(time.Second))
}

func podPhaseOf(ctx SpecContext, ns, name string) corev1.PodPhase {
	p, err := getPod(ctx, ns, name)
	Expect(err).NotTo(HaveOccurred())
	return p.Status.Phase
}

// deleteNamedPod deletes a pod and waits until it is gone.
func deleteNamedPod(ctx SpecContext, ns, name string) {
	p, err := getPod(ctx, ns, name)
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Delete(ctx, p)).To(Succeed())
	Eventually(func() bool {
		_, err := getPod(ctx, ns, name)
		return client.IgnoreNotFound(err) == nil && err != nil
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeTrue(), "pod %s/%s gone", ns, name)
}
