package dra

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

// expectFinishedPodsFreeTheirClaims (issue 26 item 1, DRA frontend): Kubernetes releases a
// finished pod's claims; two 7g.80gb bridge pods that finish, one Succeeded and one Failed,
// their objects kept, leave both H100s to the next two, and slice-map shows no slice held by
// a finished pod.
func expectFinishedPodsFreeTheirClaims(ctx SpecContext) {
	const ns = "e2e-dra-finished"
	createNamespace(ctx, ns)
	DeferCleanup(func(ctx SpecContext) {
		deleteNamespace(ctx, ns)
		expectNothingPrepared(ctx, ns)
	})
	Expect(k8s.Create(ctx, bridgePod(ns, "done-ok", "7g.80gb", localnode.FinishedScript(printDevice, 20, 0)))).To(Succeed())
	Expect(k8s.Create(ctx, bridgePod(ns, "done-failed", "7g.80gb", localnode.FinishedScript(printDevice, 20, 1)))).To(Succeed())
	waitPhase(ctx, ns, corev1.PodRunning, "done-ok", "done-failed")
	Expect(k8s.Create(ctx, bridgePod(ns, "next-0", "7g.80gb", printDevice+waitForTerm))).To(Succeed())
	Expect(k8s.Create(ctx, bridgePod(ns, "next-1", "7g.80gb", printDevice+waitForTerm))).To(Succeed())

	r := localnode.FinishedToReuse(ctx, k8s, ns, []string{"done-ok", "done-failed"}, []string{"next-0", "next-1"}, 2*time.Minute)
	for _, d := range r.Latencies {
		GinkgoWriter.Printf("dra: finished → next pod bound in %s\n", d.Round(time.Millisecond))
		AddReportEntry("finished → slot reusable (DRA)", d.Round(time.Millisecond).String())
	}
	waitPhase(ctx, ns, corev1.PodSucceeded, "done-ok")
	waitPhase(ctx, ns, corev1.PodFailed, "done-failed")
	waitPhase(ctx, ns, corev1.PodRunning, "next-0", "next-1")
	a := expectPrepared(ctx, ns, "next-0", "7g.80gb")
	b := expectPrepared(ctx, ns, "next-1", "7g.80gb")
	Expect(a).NotTo(Equal(b))
	Eventually(func(g Gomega) {
		finished, err := localnode.FinishedHolders(ctx, k8s)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(finished).To(BeEmpty(), "slice-map")
		overlaps, _, err := instancesOverlap()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(overlaps).To(BeEmpty())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}
