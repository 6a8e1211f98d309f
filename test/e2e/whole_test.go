package e2e

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

// nodeGPUs is the node's GPUs as its NodeAccelerator reports them.
func nodeGPUs(ctx SpecContext) []slicerv1alpha1.GPUStatus {
	var na slicerv1alpha1.NodeAccelerator
	Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, &na)).To(Succeed())
	return na.Status.GPUs
}

// setGPUModes is localnode.SetGPUModes on this suite's node.
func setGPUModes(ctx SpecContext, policies []slicerv1alpha1.GPUModePolicy) {
	GinkgoHelper()
	localnode.SetGPUModes(ctx, k8s, node, policies)
}

// wholePod asks for n whole GPUs as users write it for NVIDIA's device plugin, prints what its
// container received, and waits.
func wholePod(ns, name string, n string) *corev1.Pod {
	return builder.Pod(ns, name).RestartNever().
		Container("main", builder.Limits(migapi.NVIDIAGPUResource, n)).Shell(printDevice + waitForTerm).Obj()
}

// wholeGPUSpec (issue 40): with the H100s' policy Dynamic, a whole-GPU pod runs beside a slice
// pod on one node: the scheduler takes the empty H100, the agent switches it out of MIG mode
// and hands the pod the whole GPU (its CDI device, NVIDIA_VISIBLE_DEVICES its UUID) through
// the real kubelet. Once it ends, an emulated client (as DCGM would) holds the GPU: a 7g.80gb
// pod that only that GPU can take waits, the switch back to MIG mode reported HeldByClient, and
// runs there once the client lets go. Then, with every H100 busy, a whole-GPU pod of higher
// priority preempts the one pod of one H100 and takes it whole. The policies are removed at
// the end with every GPU in MIG mode again.
func wholeGPUSpec(ctx SpecContext) {
	const ns = "e2e-whole"
	createNamespace(ctx, ns)
	DeferCleanup(deleteNamespace, ns)
	currentGroup = "whole GPUs"
	setGPUModes(ctx, []slicerv1alpha1.GPUModePolicy{{Model: slicerv1alpha1.GPUModel(mig.H100_80GB.String()), Mode: slicerv1alpha1.GPUModePolicyDynamic}})
	DeferCleanup(setGPUModes, []slicerv1alpha1.GPUModePolicy(nil))

	createPod(ctx, slicePod(ns, "slice", "1g.10gb"))
	waitRunning(ctx, ns, "slice")
	sliced := allocationGPU(ctx, ns, "slice")

	createPod(ctx, wholePod(ns, "whole", "1"))
	waitRunning(ctx, ns, "whole")
	allocs := allocationsIn(ctx, ns)
	var w slicerv1alpha1.SliceAllocation
	for _, a := range allocs {
		if a.Spec.PodName == "whole" {
			w = a
		}
	}
	Expect(w.Spec.WholeGPU).To(BeTrue(), "the whole-GPU pod's allocation: %+v", allocs)
	Expect(w.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
	Expect(w.Spec.GPUUUID).NotTo(Equal(sliced), "the whole GPU is not the sliced one")
	var saw map[string]string
	Eventually(func() (err error) { saw, err = containerSaw(ctx, ns, "whole"); return err }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	Expect(saw).To(HaveKeyWithValue("visible", w.Spec.GPUUUID), "the container sees exactly its GPU")
	Expect(saw).To(HaveKeyWithValue("gpu", w.Spec.GPUUUID))
	Expect(saw).To(HaveKeyWithValue("device", ""), "no MIG device")
	for _, gs := range nodeGPUs(ctx) {
		if gs.UUID == w.Spec.GPUUUID {
			Expect(gs.Mode).To(Equal(slicerv1alpha1.GPUModeWhole), "GPU %d", gs.Index)
			Expect(gs.MIGMode).To(Equal(slicerv1alpha1.MIGModeDisabled), "GPU %d", gs.Index)
		}
	}
	// The slice pod kept its slice on the other H100.
	Expect(podPhase(ctx, ns, "slice")).To(Equal(corev1.PodRunning))

	// The whole-GPU pod ends, and a client holds its GPU (as DCGM would): a 7g.80gb pod, which
	// only that now empty H100 can take, waits with the GPU's switch back to MIG mode pending
	// (HeldByClient); once the client lets go the switch is done and the pod runs there.
	Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: objectMeta(ns, "whole")})).To(Succeed())
	Eventually(func() []slicerv1alpha1.SliceAllocation {
		return slices.DeleteFunc(allocationsIn(ctx, ns), func(a slicerv1alpha1.SliceAllocation) bool { return !a.Spec.WholeGPU })
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeEmpty(), "the whole GPU is released")
	held := localnode.EmulatedGPUIndex(node, w.Spec.GPUUUID)
	localnode.HoldGPU(emulatedStateFile, held, true)
	createPod(ctx, slicePod(ns, "big", "7g.80gb"))
	Eventually(func() (slicerv1alpha1.GPUModeSwitchReason, error) {
		for _, gs := range nodeGPUs(ctx) {
			if gs.UUID == w.Spec.GPUUUID && gs.ModeSwitch != nil {
				return gs.ModeSwitch.Reason, nil
			}
		}
		return "", fmt.Errorf("GPU %d reports no switch", held)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(slicerv1alpha1.GPUModeSwitchHeldByClient))
	Expect(podPhase(ctx, ns, "big")).To(Equal(corev1.PodPending), "no slice while the GPU is held whole")
	localnode.HoldGPU(emulatedStateFile, held, false)
	waitRunning(ctx, ns, "big")
	Expect(allocationGPU(ctx, ns, "big")).To(Equal(w.Spec.GPUUUID), "the 7g.80gb slice is on the GPU that was whole")
	for _, gs := range nodeGPUs(ctx) {
		Expect(gs.MIGMode).To(Equal(slicerv1alpha1.MIGModeEnabled), "GPU %d is in MIG mode again", gs.Index)
	}
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	// Every H100 busy (the 7g.80gb pod on one; on the other the slice pod, or a second
	// 7g.80gb pod when the slice went to an A100): a whole-GPU pod of higher priority evicts the
	// one pod of one of them and takes that GPU whole.
	currentGroup = "whole GPUs: preemption"
	h100s := map[string]bool{}
	for _, gs := range nodeGPUs(ctx) {
		if gs.Model == slicerv1alpha1.GPUModel(mig.H100_80GB.String()) {
			h100s[gs.UUID] = true
		}
	}
	if !h100s[sliced] {
		createPod(ctx, slicePod(ns, "big-2", "7g.80gb"))
		waitRunning(ctx, ns, "big-2")
	}
	onH100 := map[string]string{} // pod -> GPU
	for _, a := range allocationsIn(ctx, ns) {
		if h100s[a.Spec.GPUUUID] {
			onH100[a.Spec.PodName] = a.Spec.GPUUUID
		}
	}
	Expect(onH100).To(HaveLen(2), "one pod on each H100")
	pc := &schedulingv1.PriorityClass{ObjectMeta: objectMeta("", "e2e-whole-high"), Value: 1000000}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, pc))).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, pc))).To(Succeed()) })
	urgent := wholePod(ns, "urgent", "1")
	urgent.Spec.PriorityClassName = pc.Name
	start := time.Now()
	createPod(ctx, urgent)
	waitRunning(ctx, ns, "urgent")
	fmt.Fprintf(GinkgoWriter, "whole GPUs: high-priority whole-GPU pod create -> Running in %s (one slice pod preempted)\n", time.Since(start).Round(time.Millisecond))
	var evicted []string
	for n := range onH100 {
		var p corev1.Pod
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &p); err != nil || p.DeletionTimestamp != nil {
			evicted = append(evicted, n)
		}
	}
	Expect(evicted).To(HaveLen(1), "exactly one slice pod is evicted")
	wholeGPU := onH100[evicted[0]]
	Expect(allocationGPU(ctx, ns, "urgent")).To(Equal(wholeGPU), "the whole GPU is the one its victim held")
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	// It ends; a 7g.80gb pod, which only that H100 can take (the other is busy), switches it
	// back, so the specs after this one find every GPU in MIG mode.
	Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: objectMeta(ns, "urgent")})).To(Succeed())
	Eventually(func() []slicerv1alpha1.SliceAllocation {
		return slices.DeleteFunc(allocationsIn(ctx, ns), func(a slicerv1alpha1.SliceAllocation) bool { return !a.Spec.WholeGPU })
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeEmpty(), "the whole GPU is released")
	createPod(ctx, slicePod(ns, "back", "7g.80gb"))
	waitRunning(ctx, ns, "back")
	Expect(allocationGPU(ctx, ns, "back")).To(Equal(wholeGPU))
	for _, gs := range nodeGPUs(ctx) {
		Expect(gs.MIGMode).To(Equal(slicerv1alpha1.MIGModeEnabled), "GPU %d is in MIG mode again", gs.Index)
	}
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}
