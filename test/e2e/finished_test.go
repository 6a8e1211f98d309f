package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

// finishingSlicePod asks for one slice, prints what it got and ends after secs seconds with
// the exit code (restartPolicy Never: 0 Succeeded, else Failed).
func finishingSlicePod(ns, name, profile string, secs, code int) *corev1.Pod {
	return builder.Pod(ns, name).RestartNever().
		Container("main", builder.Limits(mig.NVIDIAResourcePrefix+profile, "1")).Shell(localnode.FinishedScript(printDevice, secs, code)).Obj()
}

// expectFinishedPodsFreeTheirSlices (issue 26 item 1): two 7g.80gb pods that finish, one
// Succeeded and one Failed, their objects kept as a Job keeps its pods, leave both H100s to
// the next two 7g.80gb pods; a pod whose container fails and restarts (restartPolicy
// OnFailure) keeps its slice; slice-map shows no slice held by a finished pod.
func expectFinishedPodsFreeTheirSlices(ctx SpecContext) {
	const ns = "e2e-finished"
	createNamespace(ctx, ns)
	DeferCleanup(deleteNamespace, ns)
	currentGroup = "after finished pods"

	restarting := builder.Pod(ns, "restarting").Container("main", builder.Limits(mig.NVIDIAResourcePrefix+"1g.5gb", "1")).
		Shell(printDevice + "; sleep 2; exit 1").Obj()
	restarting.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	createPod(ctx, restarting)
	// Long enough to see them Running and queue the next two behind them.
	createPod(ctx, finishingSlicePod(ns, "done-ok", "7g.80gb", 20, 0))
	createPod(ctx, finishingSlicePod(ns, "done-failed", "7g.80gb", 20, 1))
	waitRunning(ctx, ns, "done-ok", "done-failed")
	held := map[string]string{} // pod → GPU
	for _, a := range allocationsIn(ctx, ns) {
		held[a.Spec.PodName] = a.Spec.GPUUUID
	}
	Expect(held).To(HaveKey("done-ok"))
	Expect(held).To(HaveKey("done-failed"))
	Expect(held["done-ok"]).NotTo(Equal(held["done-failed"]))
	createPod(ctx, slicePod(ns, "next-0", "7g.80gb"))
	createPod(ctx, slicePod(ns, "next-1", "7g.80gb"))

	r := localnode.FinishedToReuse(ctx, k8s, ns, []string{"done-ok", "done-failed"}, []string{"next-0", "next-1"}, 2*time.Minute)
	for _, d := range r.Latencies {
		GinkgoWriter.Printf("e2e: finished → next pod bound in %s\n", d.Round(time.Millisecond))
		AddReportEntry("finished → slot reusable (device plugin)", d.Round(time.Millisecond).String())
	}
	Expect(podPhase(ctx, ns, "done-ok")).To(Equal(corev1.PodSucceeded))
	Expect(podPhase(ctx, ns, "done-failed")).To(Equal(corev1.PodFailed))
	waitRunning(ctx, ns, "next-0", "next-1")

	var restartingDevice string
	Eventually(func(g Gomega) {
		var gpus, stale []string
		nexts := 0
		for _, a := range allocationsIn(ctx, ns) {
			switch a.Spec.PodName {
			case "done-ok", "done-failed":
				stale = append(stale, a.Name)
			case "next-0", "next-1":
				nexts++
				gpus = append(gpus, a.Spec.GPUUUID)
			case "restarting":
				restartingDevice = a.Status.MIGDeviceUUID
				g.Expect(a.DeletionTimestamp).To(BeNil())
			}
		}
		g.Expect(stale).To(BeEmpty(), "allocations of finished pods")
		g.Expect(nexts).To(Equal(2))
		g.Expect(gpus).To(ConsistOf(held["done-ok"], held["done-failed"]), "the next pods took the H100s the finished ones left")
		finished, err := localnode.FinishedHolders(ctx, k8s)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(finished).To(BeEmpty(), "slice-map")
		g.Expect(checkInvariants(ctx)).To(Succeed())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	// The finished pods' objects stay.
	for _, name := range []string{"done-ok", "done-failed"} {
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Pod{})).To(Succeed())
	}

	By("the pod whose container restarts keeps its slice: the same device after a restart")
	Expect(restartingDevice).NotTo(BeEmpty())
	Eventually(func(g Gomega) {
		var p corev1.Pod
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "restarting"}, &p)).To(Succeed())
		g.Expect(p.Status.Phase).To(BeElementOf(corev1.PodRunning, corev1.PodPending))
		g.Expect(p.Status.ContainerStatuses).To(ContainElement(HaveField("RestartCount", BeNumerically(">=", 1))))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	Eventually(func(g Gomega) {
		saw, err := containerSaw(ctx, ns, "restarting")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(saw).To(HaveKeyWithValue("device", restartingDevice))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	for _, a := range allocationsIn(ctx, ns) {
		if a.Spec.PodName == "restarting" {
			Expect(a.DeletionTimestamp).To(BeNil())
			Expect(a.Status.MIGDeviceUUID).To(Equal(restartingDevice))
		}
	}
	Expect(checkInvariants(ctx)).To(Succeed())
}
