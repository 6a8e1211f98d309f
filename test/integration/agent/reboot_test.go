package agent_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

// A node reboot destroys every MIG instance (MIG mode stays) while the kubelet keeps, in its
// device manager checkpoint, which device IDs each pod got, and starts the pods' containers
// again with the CDI device names it was given at Allocate (docs/design/invariants.md, I14).
var _ = Describe("A rebooted node gets its slices back", func() {
	// reboot stops the agent, empties the emulated GPUs, and starts the agent again; the
	// kubelet reports the devices its checkpoint gives each pod (usage by device ID).
	reboot := func(n *node, foreign func()) {
		n.stop()
		Expect(n.backend.Reboot()).To(Succeed())
		n.newBackend()
		if foreign != nil {
			foreign()
		}
		n.start()
	}
	// specEnv is the environment a device's CDI spec gives, read as a runtime reads it.
	specEnv := func(g Gomega, n *node, id string) map[string]string {
		spec, err := cdiapi.ReadSpec((&cdi.Writer{Dir: n.cdiDir}).Path(id), 0)
		g.Expect(err).NotTo(HaveOccurred())
		d := spec.GetDevice(id)
		g.Expect(d).NotTo(BeNil(), "spec of %s names no such device", id)
		env := map[string]string{}
		for _, kv := range d.ContainerEdits.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		return env
	}
	events := func(g Gomega, a *slicerv1alpha1.SliceAllocation, reason string) []corev1.Event {
		var evs corev1.EventList
		g.Expect(k8s.List(ctx, &evs, client.InNamespace(a.Namespace))).To(Succeed())
		var out []corev1.Event
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == a.Name && e.Reason == reason {
				out = append(out, e)
			}
		}
		return out
	}

	It("recreates each live allocation's instance at its placement, under the device ID the kubelet checkpointed", func() {
		n := newNode("n-reboot-ids", mig.H100_80GB, mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		allocs := []*slicerv1alpha1.SliceAllocation{n.allocate(0, "3g.40gb", 4, 4), n.allocate(0, "1g.10gb", 0, 1), n.allocate(1, "2g.20gb", 2, 2)}
		before := map[string]string{} // device ID → MIG UUID
		kubelet := map[string]string{}
		for _, a := range allocs {
			got := n.waitReady(a)
			id := framework.DeviceIDOf(got)
			before[id] = got.Status.MIGDeviceUUID
			kubelet[id] = "team-a/" + a.Spec.PodName
		}
		n.invariants()
		advertised := n.adv.IDs()
		Expect(advertised).To(HaveLen(3))
		n.usage.Set(kubelet)

		reboot(n, nil)
		Eventually(func(g Gomega) {
			for _, a := range allocs {
				got := n.get(a)
				id := framework.DeviceIDOf(got)
				g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
				g.Expect(got.Status.ActualGPUUUID).To(BeEmpty(), "moved to another GPU")
				g.Expect(got.Status.ActualPlacement).To(BeNil(), "moved to another placement")
				g.Expect(got.Status.MIGDeviceUUID).NotTo(Equal(before[id]), "%s: no new instance", a.Name)
				// The spec under the checkpointed name points at the new instance.
				env := specEnv(g, n, id)
				g.Expect(env).To(HaveKeyWithValue(cdi.EnvMIGDevice, got.Status.MIGDeviceUUID))
				g.Expect(env).To(HaveKeyWithValue(cdi.EnvVisibleDevices, got.Status.MIGDeviceUUID))
			}
			// The same device IDs, for the same resources, as before the reboot.
			g.Expect(n.adv.IDs()).To(Equal(advertised))
			g.Expect(events(g, allocs[0], agent.ReasonSliceRecreated)).NotTo(BeEmpty())
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(n.backend.Instances()).To(HaveLen(3))
		for _, in := range n.backend.Instances() {
			id := mig.Slot{GPU: n.gpu(in.GPU), Profile: in.Profile, Placement: in.Placement}.DeviceID()
			Expect(before).To(HaveKey(id), "an instance at a slot no allocation had")
		}
		n.invariants()
	})

	It("hands nothing over when a placement cannot be recreated: the device is not advertised and the allocation says why", func() {
		n := newNode("n-reboot-lost", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		lost := n.allocate(0, "1g.10gb", 0, 1)
		kept := n.allocate(0, "1g.10gb", 1, 1)
		lostReady, keptReady := n.waitReady(lost), n.waitReady(kept)
		lostID, keptID := framework.DeviceIDOf(lostReady), framework.DeviceIDOf(keptReady)
		n.usage.Set(map[string]string{lostID: "team-a/" + lost.Spec.PodName, keptID: "team-a/" + kept.Spec.PodName})

		// Before the agent comes back, something outside Slicer creates an instance over
		// lost's placement (another profile, so no allocation's slot) and uses it.
		var foreignUUID string
		reboot(n, func() {
			Expect(n.backend.Init()).To(Succeed())
			var err error
			foreignUUID, err = n.backend.CreateInstance(0, "1g.10gb+me", 0, false)
			Expect(err).NotTo(HaveOccurred())
			n.backend.SetInUse(foreignUUID, true)
		})
		n.waitReady(kept)
		Eventually(func(g Gomega) {
			got := n.get(lost)
			g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationPending))
			g.Expect(got.Status.Reason).To(Equal("WaitingForOrphan"))
			evs := events(g, lost, agent.ReasonSliceLost)
			g.Expect(evs).To(HaveLen(1))
			g.Expect(evs[0].Type).To(Equal(corev1.EventTypeWarning))
			g.Expect(evs[0].Message).To(ContainSubstring(lostID))
			// kept is back under its ID; lost's ID is not advertised (the kubelet refuses to
			// admit or start its pod), nor is the foreign instance (no allocation holds it).
			ids := n.adv.IDs()
			g.Expect(ids).To(HaveKey(keptID))
			g.Expect(ids).NotTo(HaveKey(lostID))
			g.Expect(ids).To(HaveLen(1))
			names, err := (&cdi.Writer{Dir: n.cdiDir}).List()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names).To(ConsistOf(keptID), "a CDI spec a container of lost's pod could start with")
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Consistently(func() []string {
			var ids []string
			for id := range n.adv.IDs() {
				ids = append(ids, id)
			}
			return ids
		}).WithTimeout(2 * time.Second).Should(ConsistOf(keptID))
		// The foreign instance is untouched (in use), and lost's slot not created over it.
		Expect(n.backend.Instances()).To(HaveLen(2))
		n.invariants(foreignUUID)
	})

	It("keeps a spec under the MIG UUID for a pod the kubelet admitted when device IDs were MIG UUIDs (upgrade)", func() {
		n := newNode("n-legacy-ids", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		a := n.allocate(0, "2g.20gb", 2, 2)
		got := n.waitReady(a)
		uuid, id := got.Status.MIGDeviceUUID, framework.DeviceIDOf(got)
		// The kubelet's checkpoint names the device as the agent before slot IDs did.
		n.usage.Set(map[string]string{uuid: "team-a/" + a.Spec.PodName})
		Eventually(func(g Gomega) {
			names, err := (&cdi.Writer{Dir: n.cdiDir}).List()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names).To(ConsistOf(id, uuid))
			g.Expect(specEnv(g, n, uuid)).To(HaveKeyWithValue(cdi.EnvMIGDevice, uuid))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(n.adv.IDs()).To(Equal(map[string]string{id: "slicer.dev/mig-2g.20gb"}), "only the slot's ID is advertised")
		n.invariants(uuid)
		// The pod is replaced: the legacy spec goes.
		n.usage.Set(nil)
		Eventually(func(g Gomega) {
			names, err := (&cdi.Writer{Dir: n.cdiDir}).List()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names).To(ConsistOf(id))
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})
})
