package dra

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectRebootPreparesAgain (issue 26 item 3, I14): an emulated reboot (`hack/local-cluster
// reboot`: every container killed, the kubelet and containerd restarted with their
// checkpoints, /var/run/cdi emptied, the emulated GPUs without instances) with a bridge pod and
// a claim pod running, restartPolicy Always. The kubelet prepares their claims again (it does
// not checkpoint that a claim is prepared), retrying until the agent's plugin is back; each pod
// runs again, with the same UID, on the device its claim was allocated (the same placement),
// its new container seeing the recreated instance.
func expectRebootPreparesAgain(ctx SpecContext) {
	const ns = "e2e-dra-reboot"
	createNamespace(ctx, ns)
	DeferCleanup(func(ctx SpecContext) {
		deleteNamespace(ctx, ns)
		expectNothingPrepared(ctx, ns)
	})
	Expect(k8s.Create(ctx, claimTemplate(ns, "mig-3g", "3g.40gb"))).To(Succeed())
	bridge := bridgePod(ns, "bridge-1g", "1g.10gb", printDevice+waitForTerm)
	claim := claimPod(ns, "claim-3g", "mig-3g", printDevice+waitForTerm)
	profiles := map[string]string{"bridge-1g": "1g.10gb", "claim-3g": "3g.40gb"}
	for _, p := range []*corev1.Pod{bridge, claim} {
		p.Spec.RestartPolicy = corev1.RestartPolicyAlways
		Expect(k8s.Create(ctx, p)).To(Succeed())
	}
	waitPhase(ctx, ns, corev1.PodRunning, "bridge-1g", "claim-3g")
	type held struct{ uid, device, mig string }
	before := map[string]held{}
	for name, profile := range profiles {
		p, err := getPod(ctx, ns, name)
		Expect(err).NotTo(HaveOccurred())
		var c resourceapi.ResourceClaim
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimOfPod(p)}, &c)).To(Succeed())
		dev, err := allocatedDevice(&c)
		Expect(err).NotTo(HaveOccurred())
		before[name] = held{uid: string(p.UID), device: dev, mig: expectPrepared(ctx, ns, name, profile)}
	}

	start := time.Now()
	runScript(ctx, nil, "hack/local-cluster", "reboot")
	Eventually(func(g Gomega) {
		for name := range profiles {
			p, err := getPod(ctx, ns, name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(p.UID)).To(Equal(before[name].uid))
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s: %s %s", name, p.Status.Reason, p.Status.Message)
			g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
			st := p.Status.ContainerStatuses[0].State.Running
			g.Expect(st).NotTo(BeNil(), "pod %s", name)
			g.Expect(st.StartedAt.Time).To(BeTemporally(">=", start.Truncate(time.Second)), "pod %s: its container from before the reboot", name)
			_, err = containerSaw(ctx, ns, name)
			g.Expect(err).NotTo(HaveOccurred())
		}
	}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Succeed())
	took := time.Since(start)
	for name, profile := range profiles {
		p, err := getPod(ctx, ns, name)
		Expect(err).NotTo(HaveOccurred())
		var c resourceapi.ResourceClaim
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimOfPod(p)}, &c)).To(Succeed())
		dev, err := allocatedDevice(&c)
		Expect(err).NotTo(HaveOccurred())
		Expect(dev).To(Equal(before[name].device), "pod %s: its claim holds another device", name)
		// The instance at the device's placement, the claim's CDI spec and the container's
		// environment all name the recreated instance.
		Expect(expectPrepared(ctx, ns, name, profile)).NotTo(Equal(before[name].mig), "pod %s: no new instance", name)
	}
	AddReportEntry("reboot → both claim pods Running again (DRA)", took.Round(100*time.Millisecond).String())
	GinkgoWriter.Printf("dra: reboot → both pods Running again at their placements in %s\n", took.Round(100*time.Millisecond))
}
