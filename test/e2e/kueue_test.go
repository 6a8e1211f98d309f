package e2e

import (
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

const (
	kueueProfile  = "1g.10gb" // an H100-80GB profile: the emulated node has two H100s, 14 such slices
	kueueQuota    = 3
	kueueJobs     = 5
	kueueJobSecs  = 12 // long enough for three to overlap, short enough to keep the spec short
	kueueQueue    = "mig"
	kueueCQ       = "e2e-mig"
	kueueGateName = "kueue.x-k8s.io/admission" // Kueue's scheduling gate on plain pods (pkg/controller/jobs/pod)
)

// kueueQueues is the ResourceFlavor, the ClusterQueue holding 3 × nvidia.com/mig-1g.10gb and
// the LocalQueue of namespace ns: what docs/kueue.md tells a user to write.
func kueueQueues(ns string) string {
	nv := mig.NVIDIAResourceName(kueueProfile)
	return fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [%[2]s]
    flavors:
    - name: %[1]s
      resources:
      - {name: %[2]s, nominalQuota: %[3]d}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: %[4]s, name: %[5]s}
spec: {clusterQueue: %[1]s}
`, kueueCQ, nv, kueueQuota, ns, kueueQueue)
}

// kueueWorkload is what the spec reads of a Kueue Workload (apis/kueue/v1beta2).
type kueueWorkload struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		PodSets []struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"podSets"`
	} `json:"spec"`
	Status struct {
		Conditions []metav1.Condition `json:"conditions"`
		Admission  *struct {
			PodSetAssignments []struct {
				ResourceUsage corev1.ResourceList `json:"resourceUsage"`
			} `json:"podSetAssignments"`
		} `json:"admission"`
	} `json:"status"`
}

func (w *kueueWorkload) is(cond string) bool {
	return meta.IsStatusConditionTrue(w.Status.Conditions, cond)
}

// owner is the kind/name of the Workload's controller (a Job, or a plain Pod).
func (w *kueueWorkload) owner() string {
	if o := metav1.GetControllerOf(w); o != nil {
		return o.Kind + "/" + o.Name
	}
	return ""
}

// requested is what Kueue read from the workload's pod template: the MIG resources of its
// containers' limits.
func (w *kueueWorkload) requested() []string {
	var out []string
	for _, ps := range w.Spec.PodSets {
		for _, c := range ps.Template.Spec.Containers {
			out = append(out, migResources(c.Resources.Limits)...)
		}
	}
	return out
}

// usage is what Kueue charged the ClusterQueue for the workload, per resource.
func (w *kueueWorkload) usage() map[string]int64 {
	out := map[string]int64{}
	if w.Status.Admission != nil {
		for _, a := range w.Status.Admission.PodSetAssignments {
			for r, q := range a.ResourceUsage {
				out[string(r)] += q.Value()
			}
		}
	}
	return out
}

func kueueWorkloads(ctx SpecContext, ns string) []kueueWorkload {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
	Expect(k8s.List(ctx, l, client.InNamespace(ns))).To(Succeed())
	out := make([]kueueWorkload, len(l.Items))
	for i := range l.Items {
		Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &out[i])).To(Succeed())
	}
	return out
}

// cqReserved is the ClusterQueue's reserved quota per resource (status.flavorsReservation).
func cqReserved(ctx SpecContext) map[string]int64 {
	cq := kueueObject("ClusterQueue", "", kueueCQ)
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cq), cq)).To(Succeed())
	var st struct {
		FlavorsReservation []struct {
			Resources []struct {
				Name  string            `json:"name"`
				Total resource.Quantity `json:"total"`
			} `json:"resources"`
		} `json:"flavorsReservation"`
	}
	raw, _, _ := unstructured.NestedMap(cq.Object, "status")
	Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)).To(Succeed())
	out := map[string]int64{}
	for _, f := range st.FlavorsReservation {
		for _, r := range f.Resources {
			if v := r.Total.Value(); v != 0 {
				out[r.Name] += v
			}
		}
	}
	return out
}

// migResources names the MIG resources (either prefix) of a resource list, with their count.
func migResources(l corev1.ResourceList) []string {
	var out []string
	for r, q := range l {
		if _, ok := mig.ProfileNameFromResource(string(r)); ok {
			out = append(out, fmt.Sprintf("%s=%d", r, q.Value()))
		}
	}
	slices.Sort(out)
	return out
}

func kueueJob(ns, name string) *batchv1.Job {
	pod := finishingSlicePod(ns, name, kueueProfile, kueueJobSecs, 0)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{kueueQueueLabel: kueueQueue}},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template:     corev1.PodTemplateSpec{Spec: pod.Spec},
		},
	}
}

func (s *jobSeen) String() string {
	return fmt.Sprintf("{admitted %s complete %s waited %t usage %v}", s.admitted.Format(time.StampMilli), s.complete.Format(time.StampMilli), s.waited, s.usage)
}

func jobComplete(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// jobSeen is what the spec saw of one Job, sampled every 250 ms.
type jobSeen struct {
	admitted, complete time.Time
	// waited: seen suspended, without a pod and without quota while three others held it
	waited bool
	usage  map[string]int64
}

// kueueSpec (issue 30 item 4): a real Kueue admits batch Jobs that ask for
// nvidia.com/mig-1g.10gb against a ClusterQueue quota of 3; Slicer's webhook rewrites their
// pods to slicer.dev/mig-1g.10gb and Slicer gives them slices. At most 3 run at once, 2 wait
// and are admitted later, all 5 complete; a plain pod in the queue is counted once, under the
// same quota; no slice is left behind.
func kueueSpec(ctx SpecContext) {
	const ns = "e2e-kueue"
	nv, sl := mig.NVIDIAResourceName(kueueProfile), mig.ResourceName(kueueProfile)
	// Every earlier spec deletes its namespace: the node starts with no slice held, so the
	// quota, not the GPUs, is what holds the Jobs back (14 × 1g.10gb fit on the two H100s).
	Eventually(func(g Gomega) {
		allocs, err := framework.ListAllocations(ctx, k8s, node)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(allocs).To(BeEmpty(), "slices still held by earlier specs")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	kq := startKueue(ctx)
	ls := kq.listeners()
	GinkgoWriter.Printf("kueue: manager listeners %v\n", ls)
	Expect(ls).To(ContainElements(kueueHealthAddr, kueueMetricsAddr, fmt.Sprintf("127.0.0.1:%d", kueueWebhookPort)))
	Expect(strings.Join(ls, " ")).NotTo(ContainSubstring("OFF LOOPBACK"))

	DeferCleanup(func(ctx SpecContext) {
		for _, o := range []*unstructured.Unstructured{kueueObject("ClusterQueue", "", kueueCQ), kueueObject("ResourceFlavor", "", kueueCQ)} {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, o))).To(Succeed())
			Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(o), o)) }).
				WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "%s %s not deleted", o.GetKind(), o.GetName())
		}
	})
	createNamespace(ctx, ns)
	DeferCleanup(deleteNamespace, ns)
	for _, doc := range strings.Split(kueueQueues(ns), "\n---\n") {
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
		Expect(k8s.Create(ctx, u)).To(Succeed())
	}
	Eventually(func(g Gomega) {
		cq := kueueObject("ClusterQueue", "", kueueCQ)
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cq), cq)).To(Succeed())
		conds, _, _ := unstructured.NestedSlice(cq.Object, "status", "conditions")
		g.Expect(conds).To(ContainElement(SatisfyAll(HaveKeyWithValue("type", "Active"), HaveKeyWithValue("status", "True"))))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	By(fmt.Sprintf("%d Jobs of one %s each, quota %d", kueueJobs, nv, kueueQuota))
	start := time.Now()
	currentGroup = "Kueue Jobs"
	seen := map[string]*jobSeen{}
	for i := range kueueJobs {
		name := fmt.Sprintf("job-%d", i)
		Expect(k8s.Create(ctx, kueueJob(ns, name))).To(Succeed())
		seen[name] = &jobSeen{}
	}
	devices := map[string]bool{} // MIG devices the Jobs' pods held
	maxRunning, maxAdmitted := 0, 0
	var maxReserved int64
	for done := 0; done < kueueJobs; {
		Expect(time.Since(start)).To(BeNumerically("<", 4*time.Minute), func() string {
			return fmt.Sprintf("Jobs not complete; seen %v; Kueue log:\n%s", seen, kq.logTail(20))
		})
		now := time.Now()
		var jobs batchv1.JobList
		Expect(k8s.List(ctx, &jobs, client.InNamespace(ns))).To(Succeed())
		var pods corev1.PodList
		Expect(k8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		podsOf, running := map[string]int{}, 0
		for _, p := range pods.Items {
			podsOf[p.Labels[batchv1.JobNameLabel]]++
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		admitted, holding := 0, map[string]bool{}
		for _, w := range kueueWorkloads(ctx, ns) {
			job, ok := strings.CutPrefix(w.owner(), "Job/")
			if !ok || seen[job] == nil {
				continue
			}
			if w.is("Admitted") {
				if seen[job].admitted.IsZero() {
					seen[job].admitted, seen[job].usage = now, w.usage()
				}
				if !w.is("Finished") {
					admitted++
					holding[job] = true
				}
			}
		}
		done = 0
		for _, j := range jobs.Items {
			s := seen[j.Name]
			if jobComplete(&j) {
				done++
				if s.complete.IsZero() {
					s.complete = now
				}
			}
			if admitted == kueueQuota && !holding[j.Name] && s.admitted.IsZero() && ptr.Deref(j.Spec.Suspend, false) && podsOf[j.Name] == 0 {
				s.waited = true
			}
		}
		reserved := cqReserved(ctx)
		for r := range reserved {
			Expect(r).To(Equal(nv), "the ClusterQueue reserves a resource it has no quota for: %v", reserved)
		}
		for _, a := range allocationsIn(ctx, ns) {
			if a.Status.MIGDeviceUUID != "" {
				devices[a.Status.MIGDeviceUUID] = true
			}
		}
		maxRunning, maxAdmitted, maxReserved = max(maxRunning, running), max(maxAdmitted, admitted), max(maxReserved, reserved[nv])
		time.Sleep(250 * time.Millisecond)
	}
	elapsed := time.Since(start)
	GinkgoWriter.Printf("kueue: %d Jobs complete in %s; at most %d admitted, %d Running, %d × %s reserved at once\n",
		kueueJobs, elapsed.Round(time.Millisecond), maxAdmitted, maxRunning, maxReserved, nv)
	AddReportEntry("Kueue: 5 Jobs, quota 3, created → all complete", elapsed.Round(time.Millisecond).String())

	Expect(maxAdmitted).To(Equal(kueueQuota), "admitted at once")
	Expect(maxReserved).To(Equal(int64(kueueQuota)), "quota reserved at once")
	Expect(maxRunning).To(Equal(kueueQuota), "Job pods Running at once")
	var order []string
	for name := range seen {
		order = append(order, name)
	}
	slices.SortFunc(order, func(a, b string) int { return seen[a].admitted.Compare(seen[b].admitted) })
	firstComplete := seen[order[0]].complete
	for _, name := range order {
		firstComplete = minTime(firstComplete, seen[name].complete)
	}
	for i, name := range order {
		s := seen[name]
		Expect(s.usage).To(Equal(map[string]int64{nv: 1}), "Job %s: what Kueue charged", name)
		if i < kueueQuota {
			Expect(s.admitted).To(BeTemporally("<", firstComplete), "Job %s: among the first %d, admitted before any Job completed", name, kueueQuota)
			Expect(s.waited).To(BeFalse(), "Job %s", name)
			continue
		}
		Expect(s.waited).To(BeTrue(), "Job %s was not seen waiting (suspended, no pod) while the quota was full", name)
		Expect(s.admitted).NotTo(BeTemporally("<", firstComplete), "Job %s admitted before a slot was released", name)
	}

	By("what Kueue saw and what the pods got: nvidia.com on the Job, slicer.dev on its pod, counted once")
	wls := kueueWorkloads(ctx, ns)
	Expect(wls).To(HaveLen(kueueJobs), "one Workload per Job: their pods are not counted again")
	for _, w := range wls {
		Expect(w.owner()).To(HavePrefix("Job/"))
		Expect(w.requested()).To(Equal([]string{nv + "=1"}), "Workload %s", w.Name)
	}
	var pods corev1.PodList
	Expect(k8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
	Expect(pods.Items).To(HaveLen(kueueJobs))
	for _, p := range pods.Items {
		expectSlicerPod(ctx, &p, sl, devices)
	}

	By("a plain pod in the queue: Kueue reads slicer.dev/ from it and charges the quota's nvidia.com/ name")
	plain := finishingSlicePod(ns, "plain", kueueProfile, 2, 0)
	plain.Labels = map[string]string{kueueQueueLabel: kueueQueue}
	createPod(ctx, plain)
	Expect(plain.Spec.SchedulingGates).To(ContainElement(HaveField("Name", kueueGateName)), "Kueue's webhook gates the pod")
	Expect(migResources(plain.Spec.Containers[0].Resources.Limits)).To(Equal([]string{sl + "=1"}), "Slicer's webhook rewrote it")
	Eventually(podPhase).WithContext(ctx).WithArguments(ns, "plain").WithTimeout(2*time.Minute).Should(Equal(corev1.PodSucceeded), "Kueue log:\n%s", kq.logTail(20))
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(plain), plain)).To(Succeed())
	expectSlicerPod(ctx, plain, sl, devices)
	// Kueue marks the pod's Workload Finished after it sees the pod Succeeded, not with it.
	var pw *kueueWorkload
	Eventually(func(g Gomega) {
		pw = nil
		for _, w := range kueueWorkloads(ctx, ns) {
			if w.owner() == "Pod/plain" {
				pw = &w
			}
		}
		g.Expect(pw).NotTo(BeNil(), "no Workload for the plain pod")
		g.Expect(pw.is("Finished")).To(BeTrue(), "the plain pod's Workload is not Finished")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	Expect(pw.requested()).To(Equal([]string{sl + "=1"}), "what Kueue read from the stored pod")
	Expect(pw.usage()).To(Equal(map[string]int64{nv: 1}), "what Kueue charged: the transformation counts it under the quota's name, once")

	By("no slice left: allocations and instances gone, the node's views agree")
	Expect(devices).NotTo(BeEmpty())
	expectDevicesGone(ctx, ns, devices)
}

// expectSlicerPod: the pod, as stored, asks for slicer.dev/ only (the webhook's rewrite), is
// Slicer's to place, Succeeded, and printed the MIG device it got, one of devices (or adds it).
func expectSlicerPod(ctx SpecContext, p *corev1.Pod, want string, devices map[string]bool) {
	Expect(migResources(p.Spec.Containers[0].Resources.Limits)).To(Equal([]string{want + "=1"}), "pod %s limits", p.Name)
	Expect(migResources(p.Spec.Containers[0].Resources.Requests)).To(Equal([]string{want + "=1"}), "pod %s requests", p.Name)
	Expect(p.Spec.SchedulerName).To(Equal(slicerv1alpha1.SchedulerName), "pod %s", p.Name)
	Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "pod %s", p.Name)
	saw, err := containerSaw(ctx, p.Namespace, p.Name)
	Expect(err).NotTo(HaveOccurred())
	Expect(saw).To(HaveKeyWithValue("profile", kueueProfile), "pod %s", p.Name)
	Expect(saw["device"]).NotTo(BeEmpty(), "pod %s got no MIG device", p.Name)
	Expect(saw["visible"]).To(Equal(saw["device"]), "pod %s sees other devices", p.Name)
	devices[saw["device"]] = true
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
