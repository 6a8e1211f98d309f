package dra

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/operator/render"
)

// The specs share one cluster and run in order; each leaves no pod and no slice behind.
var _ = Describe("Slicer's DRA frontend on the local node, stock kube-scheduler only", Ordered, func() {
	It("registers the agent's kubelet plugin, publishes the node's ResourceSlices and one DeviceClass per H100 profile", func(ctx SpecContext) {
		// the kubelet found the plugin through its registration socket
		Expect(filepath.Join("/var/lib/kubelet/plugins_registry", migdra.DriverName+"-reg.sock")).To(BeAnExistingFile())
		devs, err := publishedDevices(ctx)
		Expect(err).NotTo(HaveOccurred())
		for _, p := range mig.H100_80GB.Profiles() {
			var c resourceapi.DeviceClass
			Expect(k8s.Get(ctx, client.ObjectKey{Name: migdra.ClassName(p.Name)}, &c)).To(Succeed())
			Expect(c.Spec.ExtendedResourceName).To(HaveValue(Equal(mig.NVIDIAResourcePrefix + mig.LegalProfileName(p.Name))))
			Expect(c.Labels).To(HaveKeyWithValue(slicerv1alpha1.LabelComponent, render.ComponentDRA))
			n := 0
			for _, d := range devs {
				if d.profile == p.Name {
					n++
				}
			}
			// every legal placement of both GPUs
			Expect(n).To(Equal(2*len(p.Placements())), "devices of %s", p.Name)
		}
	})

	It("gives a pod that asks nvidia.com/mig-1g.10gb (the extended-resource bridge) and a pod with a claim for mig-3g.40gb exactly their slices through CDI", func(ctx SpecContext) {
		const ns = "e2e-dra"
		createNamespace(ctx, ns)
		Expect(k8s.Create(ctx, claimTemplate(ns, "mig-3g", "3g.40gb"))).To(Succeed())
		start := time.Now()
		Expect(k8s.Create(ctx, bridgePod(ns, "bridge-1g", "1g.10gb", printDevice+waitForTerm))).To(Succeed())
		Expect(k8s.Create(ctx, claimPod(ns, "claim-3g", "mig-3g", printDevice+waitForTerm))).To(Succeed())
		waitPhase(ctx, ns, corev1.PodRunning, "bridge-1g", "claim-3g")
		GinkgoWriter.Printf("dra: two pods Running %s after the first was created\n", time.Since(start).Round(time.Millisecond))
		a := expectPrepared(ctx, ns, "bridge-1g", "1g.10gb")
		b := expectPrepared(ctx, ns, "claim-3g", "3g.40gb")
		Expect(a).NotTo(Equal(b))
	})

	It("destroys the instances and their CDI specs when the pods are deleted (Unprepare)", func(ctx SpecContext) {
		start := time.Now()
		deleteNamespace(ctx, "e2e-dra")
		expectNothingPrepared(ctx, "e2e-dra")
		GinkgoWriter.Printf("dra: namespace deleted and every slice destroyed in %s\n", time.Since(start).Round(time.Millisecond))
	})

	It("prepares a pod whose claim was allocated while no agent ran, once the agent is back, with exactly its device", func(ctx SpecContext) {
		const ns, name, profile = "e2e-dra-restart", "while-away", "2g.20gb"
		createNamespace(ctx, ns)
		DeferCleanup(func(ctx SpecContext) {
			setAgentNodeSelector(ctx, nil)
			deleteNamespace(ctx, ns)
			expectNothingPrepared(ctx, ns)
		})

		By("the agent's DaemonSet gets a node selector no node matches: its pod goes and no new one comes")
		// the operator applies only its own fields, so it leaves this one alone
		setAgentNodeSelector(ctx, map[string]string{agentAwayLabel: "true"})
		Eventually(agentPods).WithContext(ctx).WithTimeout(2 * time.Minute).Should(BeEmpty())
		away := time.Now()

		By("a pod asks while no plugin serves the node: the scheduler allocates its claim from the slices still published")
		// the kubelet wipes an unusable driver's slices 30 s after its connection ends
		// (docs/design/dra.md); the pod is created at once, so they are still there
		Expect(publishedDevices(ctx)).NotTo(BeEmpty(), "the kubelet wiped the driver's slices before the pod was created")
		Expect(k8s.Create(ctx, bridgePod(ns, name, profile, printDevice+waitForTerm))).To(Succeed())
		var claim string
		Eventually(func(g Gomega) {
			p, err := getPod(ctx, ns, name)
			g.Expect(err).NotTo(HaveOccurred())
			claim = claimOfPod(p)
			g.Expect(claim).NotTo(BeEmpty())
			var c resourceapi.ResourceClaim
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, &c)).To(Succeed())
			g.Expect(c.Status.Allocation).NotTo(BeNil())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "claim of %s allocated", name)
		allocated := time.Since(away)

		By("the kubelet says it cannot prepare the claim; the pod does not start")
		Eventually(func(g Gomega) {
			var events corev1.EventList
			g.Expect(k8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(And(
				HaveField("InvolvedObject.Name", name),
				HaveField("Reason", "FailedPrepareDynamicResources"),
				HaveField("Message", ContainSubstring(migdra.DriverName)))))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		p, err := getPod(ctx, ns, name)
		Expect(err).NotTo(HaveOccurred())
		Expect(p.Status.Phase).To(Equal(corev1.PodPending))
		Expect(agentPods(ctx)).To(BeEmpty())

		By("the kubelet wipes the driver's slices of its node; the allocated claim keeps its device")
		Eventually(publishedDevices).WithContext(ctx).WithTimeout(2 * time.Minute).Should(BeEmpty())
		wiped := time.Since(away)
		var c resourceapi.ResourceClaim
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, &c)).To(Succeed())
		dev, err := allocatedDevice(&c)
		Expect(err).NotTo(HaveOccurred())

		By("the agent comes back: it publishes again, the kubelet prepares the claim, the pod runs with exactly its device")
		setAgentNodeSelector(ctx, nil)
		waitPhase(ctx, ns, corev1.PodRunning, name)
		Eventually(publishedDevices).WithContext(ctx).WithTimeout(time.Minute).Should(HaveKey(dev))
		Expect(expectPrepared(ctx, ns, name, profile)).To(HavePrefix("MIG-"))
		GinkgoWriter.Printf("dra restart: claim allocated %s after the agent pod was gone; the kubelet wiped the slices %s after; the pod ran %s after\n",
			allocated.Round(time.Millisecond), wiped.Round(time.Millisecond), time.Since(away).Round(time.Millisecond))
	})

	It("gives both H100s of two finished 7g.80gb pods (one Succeeded, one Failed, objects kept) to the next two", expectFinishedPodsFreeTheirClaims)

	It("after an emulated reboot, prepares the claims again: both pods run again at their placements on recreated instances (I14)", expectRebootPreparesAgain)

	It("taints a GPU's devices on an XID that breaks it: the next pod goes to the other GPU, the running one stays, and the reset brings the devices back", expectXIDTakesTheGPUOut)

	It("survives a churn of 120 bridge pods of mixed profiles in waves: no two allocated slices or instances ever overlap, all destroyed at the end", func(ctx SpecContext) {
		const ns = "e2e-dra-churn"
		createNamespace(ctx, ns)
		// more than fits at once on 2 × H100 (8 memory slices each): pods wait for the ones
		// before them to finish, so claims are allocated, prepared and unprepared throughout
		profiles := []string{"1g.10gb", "1g.10gb", "1g.10gb", "2g.20gb", "2g.20gb", "3g.40gb", "1g.20gb", "4g.40gb"}
		const waves, perWave = 5, 24
		// sampled while the waves run: the invariant must hold at every observed point
		var (
			mu        sync.Mutex
			overlaps  []string
			samples   int
			maxAlloc  int
			maxInsts  int
			sampleErr error
		)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				bad, nAlloc, err := allocationsOverlap(ctx)
				badInst, nInst, ierr := instancesOverlap()
				mu.Lock()
				if err != nil || ierr != nil {
					sampleErr = errors.Join(err, ierr)
				}
				overlaps = append(overlaps, bad...)
				overlaps = append(overlaps, badInst...)
				samples++
				maxAlloc, maxInsts = max(maxAlloc, nAlloc), max(maxInsts, nInst)
				mu.Unlock()
			}
		}()
		start := time.Now()
		for w := range waves {
			var names []string
			for i := range perWave {
				name := fmt.Sprintf("w%d-%02d", w, i)
				p := profiles[(w+i)%len(profiles)]
				Expect(k8s.Create(ctx, bridgePod(ns, name, p, printDevice+"; sleep 1"))).To(Succeed())
				names = append(names, name)
			}
			waitPhase(ctx, ns, corev1.PodSucceeded, names...)
			for i, name := range names {
				saw, err := containerSaw(ctx, ns, name)
				Expect(err).NotTo(HaveOccurred())
				Expect(saw).To(HaveKeyWithValue("profile", profiles[(w+i)%len(profiles)]), "pod %s", name)
				Expect(saw["device"]).To(HavePrefix("MIG-"), "pod %s", name)
			}
			Expect(k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns))).To(Succeed())
			GinkgoWriter.Printf("dra churn: wave %d of %d pods done at %s\n", w, perWave, time.Since(start).Round(time.Millisecond))
		}
		deleteNamespace(ctx, ns)
		expectNothingPrepared(ctx, ns)
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		GinkgoWriter.Printf("dra churn: %d pods in %s; %d samples, at most %d allocated claims and %d instances at once\n",
			waves*perWave, time.Since(start).Round(time.Millisecond), samples, maxAlloc, maxInsts)
		Expect(sampleErr).NotTo(HaveOccurred())
		Expect(overlaps).To(BeEmpty())
		Expect(samples).To(BeNumerically(">", 0))
	})

	It("runs a pod that asks nvidia.com/gpu (the whole-GPU class's bridge) beside a slice pod on a GPU it switches out of MIG mode, and back for two 7g.80gb pods", expectWholeGPUs)

	// Last: the cluster keeps no Slicer afterwards.
	It("deletes the driver's ResourceSlices on uninstall once the agent is gone, those of a node that is down included, and no other driver's", func(ctx SpecContext) {
		// a node whose kubelet is down never wipes its slices: only the operator can
		const gone = "e2e-node-that-is-down"
		ours, theirs := downNodeSlice(gone, migdra.DriverName), downNodeSlice(gone, "gpu.e2e.example.com")
		Expect(k8s.Create(ctx, ours)).To(Succeed())
		Expect(k8s.Create(ctx, theirs)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, theirs))).To(Succeed())
		})
		Expect(publishedDevices(ctx)).NotTo(BeEmpty())

		start := time.Now()
		Expect(k8s.Delete(ctx, &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}})).To(Succeed())
		Eventually(func() bool {
			err := k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})
			return apierrors.IsNotFound(err)
		}).WithContext(ctx).WithTimeout(3*time.Minute).Should(BeTrue(), "Slicer deleted")
		took := time.Since(start)
		Expect(agentPods(ctx)).To(BeEmpty())
		var list resourceapi.ResourceSliceList
		Expect(k8s.List(ctx, &list)).To(Succeed())
		var left []string
		for _, s := range list.Items {
			left = append(left, s.Spec.Driver+" "+s.Name)
		}
		Expect(left).To(ConsistOf(theirs.Spec.Driver + " " + theirs.Name))
		GinkgoWriter.Printf("dra uninstall: Slicer deleted, agent gone and the driver's slices deleted in %s\n", took.Round(time.Millisecond))
	})
})
