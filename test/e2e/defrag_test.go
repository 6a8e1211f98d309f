package e2e

import (
	"context"
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
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/builder"
)

// defragmentationSpec (issue 27): the two emulated H100s are each blocked for 7g.80gb by one
// 1g.10gb replica of a Deployment (the A100s are kept full). With Recommend, a 7g.80gb pod gets
// the plan as an Event and nothing is evicted; with Evict, exactly one replica is evicted, its
// replacement runs on the other H100, and the 7g.80gb pod runs (docs/design/defragmentation.md).
func defragmentationSpec(ctx SpecContext) {
	const ns = "e2e-defrag"
	createNamespace(ctx, ns)
	DeferCleanup(deleteNamespace, ns)
	DeferCleanup(setDefragmentation, slicerv1alpha1.DefragmentationRecommend)
	setDefragmentation(ctx, slicerv1alpha1.DefragmentationRecommend)

	gpuOf := func(pod string) string {
		for _, a := range allocationsIn(ctx, ns) {
			if a.Spec.PodName == pod {
				return a.Spec.GPUUUID
			}
		}
		return ""
	}
	deleteAndWait := func(names ...string) {
		GinkgoHelper()
		for _, n := range names {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: objectMeta(ns, n)}, client.GracePeriodSeconds(0)))).To(Succeed())
		}
		Eventually(func() []string {
			var left []string
			for _, a := range allocationsIn(ctx, ns) {
				for _, n := range names {
					if a.Spec.PodName == n {
						left = append(left, n)
					}
				}
			}
			return left
		}).WithContext(ctx).WithTimeout(60 * time.Second).Should(BeEmpty())
	}
	webPods := func() []corev1.Pod {
		var list corev1.PodList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"app": "web"})).To(Succeed())
		var out []corev1.Pod
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
		return out
	}
	runningWeb := func() map[string]string { // pod -> GPU
		out := map[string]string{}
		for _, p := range webPods() {
			if p.Status.Phase == corev1.PodRunning {
				out[p.Name] = gpuOf(p.Name)
			}
		}
		return out
	}

	currentGroup = "defragmentation: setting the scene"
	By("the A100s are kept full, and one H100 is held while the first replica lands on the other")
	createPod(ctx, slicePod(ns, "a100-0", "7g.40gb"))
	createPod(ctx, slicePod(ns, "a100-1", "7g.40gb"))
	createPod(ctx, slicePod(ns, "hold", "7g.80gb"))
	waitRunning(ctx, ns, "a100-0", "a100-1", "hold")
	web := &appsv1.Deployment{
		ObjectMeta: objectMeta(ns, "web"),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       builder.Pod(ns, "x").Container("main", builder.Limits(mig.NVIDIAResourcePrefix+"1g.10gb", "1")).Shell(printDevice + waitForTerm).Obj().Spec,
			},
		},
	}
	web.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	Expect(k8s.Create(ctx, web)).To(Succeed())
	Eventually(func() int { return len(runningWeb()) }).WithContext(ctx).WithTimeout(90 * time.Second).Should(Equal(1))
	var firstGPU string
	for _, g := range runningWeb() {
		firstGPU = g
	}
	Expect(firstGPU).NotTo(Equal(gpuOf("hold")))
	deleteAndWait("hold")
	By("six 1g.10gb pods fill the first replica's H100, so the second replica goes to the other")
	var fillers []string
	for i := range 6 {
		name := fmt.Sprintf("fill-%d", i)
		createPod(ctx, slicePod(ns, name, "1g.10gb"))
		fillers = append(fillers, name)
	}
	waitRunning(ctx, ns, fillers...)
	for _, f := range fillers {
		Expect(gpuOf(f)).To(Equal(firstGPU), "filler %s was not packed onto the first replica's GPU", f)
	}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(web), web)).To(Succeed())
	web.Spec.Replicas = ptr.To[int32](2)
	Expect(k8s.Update(ctx, web)).To(Succeed())
	Eventually(func() int { return len(runningWeb()) }).WithContext(ctx).WithTimeout(90 * time.Second).Should(Equal(2))
	deleteAndWait(fillers...)
	before := runningWeb()
	Expect(before).To(HaveLen(2))
	gpus := map[string]bool{}
	for _, g := range before {
		gpus[g] = true
	}
	Expect(gpus).To(HaveLen(2), "one replica on each H100: %v", before)

	currentGroup = "defragmentation: Recommend"
	createPod(ctx, slicePod(ns, "big-recommend", "7g.80gb"))
	Eventually(func() []string {
		return podEvents(ctx, ns, "big-recommend", slicerv1alpha1.EventDefragmentationPlanned)
	}).
		WithContext(ctx).WithTimeout(60 * time.Second).Should(ContainElement(ContainSubstring("1 move(s): move pod " + ns + "/web-")))
	Consistently(runningWeb).WithContext(ctx).WithTimeout(5*time.Second).Should(Equal(before), "Recommend evicts nothing")
	Expect(podPhase(ctx, ns, "big-recommend")).To(Equal(corev1.PodPending))
	deleteAndWait("big-recommend")

	currentGroup = "defragmentation: Evict"
	setDefragmentation(ctx, slicerv1alpha1.DefragmentationEvict)
	start := time.Now()
	createPod(ctx, slicePod(ns, "big-evict", "7g.80gb"))
	waitRunning(ctx, ns, "big-evict")
	fmt.Fprintf(GinkgoWriter, "defragmentation: 7g.80gb create -> Running with one move in %s\n", time.Since(start).Round(time.Millisecond))
	var bigEvict corev1.Pod
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "big-evict"}, &bigEvict)).To(Succeed())
	var record string
	for _, c := range bigEvict.Status.Conditions {
		if c.Type == slicerv1alpha1.PodConditionDefragmentationPlan {
			record = c.Message
		}
	}
	Expect(record).To(ContainSubstring(`"pod":"`+ns+`/web-`),
		"the plan's record (scheduler/plugin/defrag_record.go) stays on the running pod: the kubelet keeps the conditions it does not own")
	Eventually(func() int { return len(runningWeb()) }).WithContext(ctx).WithTimeout(90 * time.Second).Should(Equal(2))
	after := runningWeb()
	kept := 0
	for p, g := range after {
		if before[p] != "" {
			kept++
			Expect(g).To(Equal(before[p]))
		}
	}
	Expect(kept).To(Equal(1), "exactly one replica was evicted: before %v, after %v", before, after)
	for p, g := range after {
		if before[p] == "" {
			var other string
			for q, h := range after {
				if q != p {
					other = h
				}
			}
			Expect(g).To(Equal(other), "the replacement %s runs on the other H100", p)
			Expect(g).NotTo(Equal(gpuOf("big-evict")))
		}
	}
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

// setDefragmentation sets the Slicer's spec.defragmentation.mode and waits for the scheduler to
// run the configuration that carries it.
func setDefragmentation(ctx context.Context, mode slicerv1alpha1.DefragmentationMode) {
	GinkgoHelper()
	var s slicerv1alpha1.Slicer
	Expect(k8s.Get(ctx, client.ObjectKey{Name: "default"}, &s)).To(Succeed())
	if s.Spec.Defragmentation.Mode == mode {
		return
	}
	s.Spec.Defragmentation.Mode = mode
	Expect(k8s.Update(ctx, &s)).To(Succeed())
	Eventually(func(g Gomega) {
		var cm corev1.ConfigMap
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerConfigMap}, &cm)).To(Succeed())
		g.Expect(fmt.Sprint(cm.Data)).To(ContainSubstring("mode: " + string(mode)))
		var d appsv1.Deployment
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerName}, &d)).To(Succeed())
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
		g.Expect(d.Status.UpdatedReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.AvailableReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.Replicas).To(Equal(*d.Spec.Replicas), "the old scheduler pod is gone")
	}).WithContext(ctx).WithTimeout(120 * time.Second).Should(Succeed())
}

// podEvents lists the messages of the Events of reason about the pod.
func podEvents(ctx context.Context, ns, pod, reason string) []string {
	var list corev1.EventList
	Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == pod && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}
