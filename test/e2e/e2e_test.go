package e2e

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// The specs share one cluster and run in order; the last two uninstall Slicer (kustomize
// install), then install, upgrade and uninstall it with Helm.
var _ = Describe("Slicer on the local node", Ordered, func() {
	// What fits at once on the emulated 2 × H100-80GB + 2 × A100-40GB.
	burst := map[string]string{
		"h100-3g": "3g.40gb", "h100-2g": "2g.20gb", "h100-1g-a": "1g.10gb", "h100-1g-b": "1g.10gb",
		"a100-3g": "3g.20gb", "a100-2g": "2g.10gb", "a100-1g-a": "1g.5gb", "a100-1g-b": "1g.5gb",
	}

	It("gives pods their slices; each container sees exactly its MIG device through CDI (I1–I4)", func(ctx SpecContext) {
		const ns = "e2e-slices"
		createNamespace(ctx, ns)
		currentGroup = "burst of 8 (one apply)"
		for name, profile := range burst {
			createPod(ctx, slicePod(ns, name, profile))
		}
		var names []string
		for name := range burst {
			names = append(names, name)
		}
		waitRunning(ctx, ns, names...)

		allocs := allocationsIn(ctx, ns)
		Expect(allocs).To(HaveLen(len(burst)))
		byPod := map[string]slicerv1alpha1.SliceAllocation{}
		for _, a := range allocs {
			byPod[a.Spec.PodName] = a
		}
		for name, profile := range burst {
			a, ok := byPod[name]
			Expect(ok).To(BeTrue(), "no allocation for pod %s", name)
			Expect(a.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
			Expect(string(a.Spec.Profile)).To(Equal(profile))
			var saw map[string]string
			Eventually(func() error {
				var err error
				saw, err = containerSaw(ctx, ns, name)
				return err
			}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
			// CDI injected the device's edits: exactly one device, the allocation's own
			Expect(saw).To(HaveKeyWithValue("device", a.Status.MIGDeviceUUID), "pod %s", name)
			Expect(saw).To(HaveKeyWithValue("visible", a.Status.MIGDeviceUUID), "pod %s sees other devices", name)
			Expect(saw).To(HaveKeyWithValue("profile", profile))
			// bound by pod: the kubelet handed the pod the slice the scheduler chose for it
			Expect(saw).To(HaveKeyWithValue("gpu", a.Spec.GPUUUID), "pod %s got a device on another GPU", name)
			Expect(saw).To(HaveKeyWithValue("placement", fmt.Sprintf("%d:%d", a.Spec.Placement.Start, a.Spec.Placement.Size)), "pod %s got another slice", name)
		}
		Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	})

	It("listens only on loopback: every TCP listener of every Slicer process (local overlay)", expectSlicerListenersOnLoopback)

	It("destroys a slice, its CDI spec and its allocation when the pod is deleted (I2)", func(ctx SpecContext) {
		const ns = "e2e-slices"
		allocs := allocationsIn(ctx, ns)
		Expect(allocs).NotTo(BeEmpty())
		devices := map[string]bool{}
		for _, a := range allocs {
			devices[a.Status.MIGDeviceUUID] = true
		}
		deleteNamespace(ctx, ns)
		expectDevicesGone(ctx, ns, devices)
	})

	It("gives a pod with init, sidecar and app containers exactly the slices the kubelet hands them out (init slices reused)", func(ctx SpecContext) {
		const ns = "e2e-containers"
		createNamespace(ctx, ns)
		currentGroup = "init, sidecar and app containers"
		runContainerCases(ctx, ns)
		deleteNamespace(ctx, ns)
		Eventually(func(g Gomega) {
			g.Expect(allocationsIn(ctx, ns)).To(BeEmpty())
			g.Expect(checkInvariants(ctx)).To(Succeed())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	})

	It("keeps pods that do not fit Pending with a reason a user can act on", func(ctx SpecContext) {
		const ns = "e2e-capacity"
		createNamespace(ctx, ns)
		DeferCleanup(deleteNamespace, ns)
		currentGroup = "whole-GPU pods"
		for i := range 3 { // two H100s hold two 7g.80gb slices
			createPod(ctx, slicePod(ns, fmt.Sprintf("whole-%d", i), "7g.80gb"))
		}
		Eventually(func(g Gomega) {
			var l corev1.PodList
			g.Expect(k8s.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
			running, pending := 0, []corev1.Pod{}
			for _, p := range l.Items {
				switch p.Status.Phase {
				case corev1.PodRunning:
					running++
				case corev1.PodPending:
					pending = append(pending, p)
				}
			}
			g.Expect(running).To(Equal(2))
			g.Expect(pending).To(HaveLen(1))
			var cond *corev1.PodCondition
			for i := range pending[0].Status.Conditions {
				if pending[0].Status.Conditions[i].Type == corev1.PodScheduled {
					cond = &pending[0].Status.Conditions[i]
				}
			}
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(corev1.PodReasonUnschedulable))
			g.Expect(cond.Message).To(ContainSubstring("7g.80gb"))
			g.Expect(cond.Message).To(ContainSubstring("no GPU has"))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		Expect(checkInvariants(ctx)).To(Succeed())
	})

	It("frees the slices of two finished 7g.80gb pods (one Succeeded, one Failed, objects kept) for the next two; a restarting pod keeps its slice", expectFinishedPodsFreeTheirSlices)

	It("takes a GPU out on an XID that breaks it: the next pod goes to the other H100, the running one stays, and the reset brings the GPU back", expectXIDTakesTheGPUOut)

	It("preempts by geometry: a high-priority pod evicts the fewest pods of lower priority and runs (I13)", preemptionSpec)

	It("after an emulated reboot, restartable slice pods run again at their slots or are rejected and replaced; none without its device (I14)", expectRebootGivesSlicesBack)

	It("defragments: Recommend names the one move on the pending pod, Evict moves one replica of a Deployment and the 7g.80gb pod runs", defragmentationSpec)

	It("runs a whole-GPU pod beside a slice pod on one node, its GPU switched out of MIG mode, and back for a 7g.80gb slice once a client holding it lets go; a higher-priority whole-GPU pod preempts one H100's pod", wholeGPUSpec)

	It("converges with no double allocation and no leak when the agent, the scheduler and the kubelet restart during a churn of 120 pods (I5)", func(ctx SpecContext) {
		const ns, total, inFlight = "e2e-churn", 120, 10
		createNamespace(ctx, ns)
		currentGroup = "churn of 120 with restarts"
		profiles := []string{"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb", "1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"}
		var created, ranToRunning atomic.Int64
		var overlapErr atomic.Value
		faults := map[int64]func(){
			30: func() {
				Expect(killProcess("slicer-agent")).To(BeNumerically(">=", 1), "no slicer-agent process to kill")
			},
			60: func() {
				Expect(k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(operatorNamespace),
					client.MatchingLabels{"slicer.dev/component": "scheduler"}, client.GracePeriodSeconds(0))).To(Succeed())
			},
			90: func() { runScript(ctx, "hack/local-cluster", "restart-kubelet") },
		}
		stopSampling := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			defer GinkgoRecover()
			for {
				select {
				case <-stopSampling:
					return
				case <-time.After(500 * time.Millisecond):
				}
				if err := specOverlaps(ctx); err != nil && overlapErr.Load() == nil {
					overlapErr.Store(err)
				}
			}
		}()

		var workers sync.WaitGroup
		for w := range inFlight {
			workers.Add(1)
			go func() {
				defer workers.Done()
				defer GinkgoRecover()
				rng := rand.New(rand.NewPCG(uint64(w), 42))
				for {
					i := created.Add(1)
					if i > total {
						return
					}
					if f, ok := faults[i]; ok {
						By(fmt.Sprintf("pod %d: fault", i))
						f()
					}
					name := fmt.Sprintf("churn-%03d", i)
					createPod(ctx, slicePod(ns, name, profiles[rng.IntN(len(profiles))]))
					// wait until Running (or give up after a while: it may not fit yet), then leave
					deadline := time.Now().Add(90 * time.Second)
					for time.Now().Before(deadline) && podPhase(ctx, ns, name) != corev1.PodRunning {
						time.Sleep(100 * time.Millisecond)
					}
					if podPhase(ctx, ns, name) == corev1.PodRunning {
						ranToRunning.Add(1)
						time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
					}
					Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: objectMeta(ns, name)}))).To(Succeed())
				}
			}()
		}
		workers.Wait()
		close(stopSampling)
		sampler.Wait()
		GinkgoWriter.Printf("churn: %d pods created, %d reached Running\n", total, ranToRunning.Load())
		Expect(overlapErr.Load()).To(BeNil(), "I1 violated during the churn")
		Expect(ranToRunning.Load()).To(BeNumerically(">=", total*3/4), "most churn pods should run")

		// converged: every churn pod gone, so no allocation, no instance, no CDI spec (I2, I5)
		deleteNamespace(ctx, ns)
		Eventually(func(g Gomega) {
			g.Expect(allocationsIn(ctx, ns)).To(BeEmpty())
			g.Expect(checkInvariants(ctx)).To(Succeed())
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		// and the node still works after the restarts: a fresh burst gets its slices, and the
		// API view, the device view and the kubelet's agree (I1–I4)
		const after = "e2e-after-churn"
		createNamespace(ctx, after)
		DeferCleanup(deleteNamespace, after)
		currentGroup = "burst of 8 (one apply)"
		var names []string
		for name, profile := range burst {
			createPod(ctx, slicePod(after, name, profile))
			names = append(names, name)
		}
		waitRunning(ctx, after, names...)
		Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}, SpecTimeout(15*time.Minute))

	It("measures create → Running for slice pods one at a time", func(ctx SpecContext) {
		const ns = "e2e-latency"
		createNamespace(ctx, ns)
		DeferCleanup(deleteNamespace, ns)
		currentGroup = "sequential (one pod at a time)"
		profiles := []string{"1g.10gb", "2g.20gb", "3g.40gb", "1g.5gb", "3g.20gb"}
		for i := range 40 {
			name := fmt.Sprintf("seq-%02d", i)
			createPod(ctx, slicePod(ns, name, profiles[i%len(profiles)]))
			waitRunning(ctx, ns, name)
			Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: objectMeta(ns, name)})).To(Succeed())
		}
	})

	It("still starts pods without MIG requests when the webhook is down, and rejects MIG pods with the policy's message", func(ctx SpecContext) {
		const ns = "e2e-webhook-down"
		createNamespace(ctx, ns)
		DeferCleanup(deleteNamespace, ns)
		ons := operatorNamespace
		// the operator would put the webhook back at once: stop it first
		scale(ctx, ons, "slicer-operator", 0)
		scale(ctx, ons, "slicer-webhook", 0)
		Eventually(func(g Gomega) {
			var l corev1.PodList
			g.Expect(k8s.List(ctx, &l, client.InNamespace(ons), client.MatchingLabels{"slicer.dev/component": "webhook"})).To(Succeed())
			g.Expect(l.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

		Expect(k8s.Create(ctx, plainPod(ns, "plain"))).To(Succeed())
		waitRunning(ctx, ns, "plain")

		err := k8s.Create(ctx, slicePod(ns, "mig", "1g.10gb"))
		Expect(err).To(HaveOccurred(), "a MIG pod was admitted unmutated while the webhook was down")
		Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("Slicer's webhook did not rewrite it (is the webhook running?)"))

		// the operator brings the webhook back (drift revert), and MIG pods are admitted again
		scale(ctx, ons, "slicer-operator", 1)
		Eventually(func() error {
			return k8s.Create(ctx, slicePod(ns, "mig", "1g.10gb"))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		waitRunning(ctx, ns, "mig")
	})

	Describe("Node Feature Discovery labels the node and the agent follows the label", nfdSpecs)

	It("refuses a pod that sets NVIDIA_VISIBLE_DEVICES itself, saying why", expectDeviceSelectionRefused)

	It("refuses a pod in kube-system that asks for slicer.dev/* directly", expectDirectSlicesRefusedInKubeNamespaces)

	It("under Kueue: 5 Jobs of one nvidia.com/mig-1g.10gb against a quota of 3 run at most 3 at once, all complete; a plain pod counts once; no slice left", kueueSpec, SpecTimeout(8*time.Minute))

	// Last but one: it uninstalls Slicer.
	It("keeps running while MIG pods hold slices, naming them (uninstall policy Wait); forced, releases every slice, then removes everything it created (I12, I2)", uninstallSpec)

	// After the uninstall: the same node, Slicer installed again with Helm (issue 30).
	It("installs with helm install (the previous chart version), gives the demo workload its slices, upgrades to the current chart with them running changing no pod and no slice; plain helm uninstall: refused naming the pods under Wait, to the CRDs under Force", helmSpec, SpecTimeout(12*time.Minute))
})

func scale(ctx SpecContext, ns, name string, replicas int32) {
	var d appsv1.Deployment
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d)).To(Succeed())
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = ptr.To(replicas)
	Expect(k8s.Patch(ctx, &d, patch)).To(Succeed())
	if replicas == 0 {
		// Until its pods are gone, not only counted out: status.replicas leaves out a terminating
		// pod, and a terminating operator still finishing a reconcile puts the webhook's replicas
		// back (seen in CI: a webhook pod created a second after the scale to 0 stayed for the spec's
		// minute).
		selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: selector})).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty(), "pods of Deployment %s/%s", ns, name)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	}
}

func objectMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}
