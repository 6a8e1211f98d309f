package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// expectRebootGivesSlicesBack (issue 26 item 3, I14): an emulated reboot (`hack/local-cluster
// reboot`: every container killed, the kubelet and containerd restarted with their state on
// disk, /var/run/cdi emptied, the emulated GPUs without instances) with restartable slice
// pods running. Each pod from before either runs again, with the same UID, at its slot, its
// new container seeing the allocation's new MIG device; or the kubelet rejected it at
// admission (UnexpectedAdmissionError: it re-admits pods before the agent, itself a pod,
// advertises again) and its controller replaced it. No container runs without its device or
// with another's, and the invariants hold.
func expectRebootGivesSlicesBack(ctx SpecContext) {
	const ns = "e2e-reboot"
	createNamespace(ctx, ns)
	DeferCleanup(deleteNamespace, ns)
	currentGroup = "after a reboot"

	res := builder.Limits(mig.NVIDIAResourcePrefix+"1g.10gb", "1")
	tmpl := builder.Pod(ns, "").Label("app", "reboot").Container("main", res).Shell(printDevice + waitForTerm).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	dep := &appsv1.Deployment{ObjectMeta: objectMeta(ns, "reboot"), Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "reboot"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}}}
	Expect(k8s.Create(ctx, dep)).To(Succeed())
	bare := builder.Pod(ns, "bare").Container("main", res).Shell(printDevice + waitForTerm).Obj()
	bare.Spec.RestartPolicy = corev1.RestartPolicyAlways
	createPod(ctx, bare)

	type held struct{ uid, id, uuid string }
	before := map[string]held{} // pod name → its slice before the reboot
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(3))
		for _, p := range pods.Items {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", p.Name)
		}
		for _, a := range allocationsIn(ctx, ns) {
			g.Expect(a.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
			before[a.Spec.PodName] = held{uid: a.Spec.PodUID, id: framework.DeviceIDOf(&a), uuid: a.Status.MIGDeviceUUID}
		}
		g.Expect(before).To(HaveLen(3))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	const rejected = "rejected at admission (UnexpectedAdmissionError); a Deployment's pod is replaced"
	start := time.Now()
	runScript(ctx, "hack/local-cluster", "reboot")
	outcome := map[string]string{}
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		allocs := map[string]slicerv1alpha1.SliceAllocation{}
		for _, a := range allocationsIn(ctx, ns) {
			if a.DeletionTimestamp == nil {
				allocs[a.Spec.PodName] = a
			}
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodFailed {
				g.Expect(p.Status.Reason).To(Equal("UnexpectedAdmissionError"), "pod %s failed: %s", p.Name, p.Status.Message)
				g.Expect(before).To(HaveKey(p.Name), "a pod created after the reboot failed")
				outcome[p.Name] = rejected
				continue
			}
			// Running again after the reboot: a container the kubelet started since.
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", p.Name)
			g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
			st := p.Status.ContainerStatuses[0].State.Running
			g.Expect(st).NotTo(BeNil(), "pod %s", p.Name)
			g.Expect(st.StartedAt.Time).To(BeTemporally(">=", start.Truncate(time.Second)), "pod %s: its container from before the reboot", p.Name)
			a, ok := allocs[p.Name]
			g.Expect(ok).To(BeTrue(), "running pod %s has no allocation", p.Name)
			g.Expect(a.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
			saw, err := containerSaw(ctx, ns, p.Name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(saw).To(HaveKeyWithValue("device", a.Status.MIGDeviceUUID), "pod %s sees another device than its allocation's", p.Name)
			g.Expect(saw).To(HaveKeyWithValue("visible", a.Status.MIGDeviceUUID), "pod %s", p.Name)
			if b, ok := before[p.Name]; ok {
				g.Expect(b.uid).To(Equal(string(p.UID)))
				g.Expect(framework.DeviceIDOf(&a)).To(Equal(b.id), "pod %s came back at another slot", p.Name)
				g.Expect(a.Status.MIGDeviceUUID).NotTo(Equal(b.uuid), "pod %s: no new instance", p.Name)
				outcome[p.Name] = "running again at its slot " + b.id
			}
			running++
		}
		// The Deployment's two replicas run (restarted or replaced); the bare pod runs again
		// unless the kubelet rejected it.
		want := 2
		if outcome["bare"] != rejected {
			want = 3
		}
		g.Expect(running).To(Equal(want))
	}).WithContext(ctx).WithTimeout(4 * time.Minute).Should(Succeed())
	took := time.Since(start)
	for name, o := range outcome {
		GinkgoWriter.Printf("e2e: after the reboot, pod %s: %s\n", name, o)
		AddReportEntry("reboot: pod "+name, o)
	}
	AddReportEntry("reboot → every slice pod Running again (device plugin)", took.Round(100*time.Millisecond).String())
	GinkgoWriter.Printf("e2e: reboot → every slice pod Running again in %s\n", took.Round(100*time.Millisecond))
	// A rejected pod is finished: its allocation goes (issue 26 item 1).
	Eventually(func(g Gomega) {
		for _, a := range allocationsIn(ctx, ns) {
			var p corev1.Pod
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: a.Spec.PodName}, &p)
			g.Expect(err == nil && p.Status.Phase == corev1.PodFailed).To(BeFalse(), fmt.Sprintf("allocation %s of failed pod %s", a.Name, a.Spec.PodName))
		}
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}
