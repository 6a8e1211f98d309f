package e2e

import (
	"context"
	"fmt"
	"sort"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// preemptionSpec: low-priority 1g.10gb pods fill every GPU that offers the profile (7 on each
// H100-80GB, 4 on each A100-40GB, whose 1g.10gb is the two-memory-slice profile); a
// high-priority 7g.80gb pod evicts exactly one H100's seven and runs; a high-priority 3g.40gb
// pod then evicts three (the fewest), not four or seven (docs/design/preemption.md). The
// victims have a 1 s grace period; create → Running of each preemptor is printed.
func preemptionSpec(ctx SpecContext) {
	const ns = "e2e-preempt"
	createNamespace(ctx, ns)
	DeferCleanup(deleteNamespace, ns)
	for name, v := range map[string]int32{"e2e-low": -10, "e2e-high": 1000000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: objectMeta("", name), Value: v}
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, pc))).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, pc))).To(Succeed()) })
	}
	pod := func(name, profile, class string) *corev1.Pod {
		p := slicePod(ns, name, profile)
		p.Spec.PriorityClassName = class
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
		return p
	}
	currentGroup = "low-priority 1g.10gb filling the GPUs"
	var low []string
	for i := range 22 {
		name := fmt.Sprintf("low-%02d", i)
		createPod(ctx, pod(name, "1g.10gb", "e2e-low"))
		low = append(low, name)
	}
	waitRunning(ctx, ns, low...)
	gpuOf := map[string]string{} // pod -> GPU UUID
	for _, a := range allocationsIn(ctx, ns) {
		gpuOf[a.Spec.PodName] = a.Spec.GPUUUID
	}
	gone := func() []string {
		var out []string
		for _, n := range low {
			var p corev1.Pod
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &p)
			if apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
				out = append(out, n)
			}
		}
		sort.Strings(out)
		return out
	}

	preempt := func(name, profile string, victims int) []string {
		GinkgoHelper()
		currentGroup = "high-priority " + profile
		start := time.Now()
		before := len(gone())
		createPod(ctx, pod(name, profile, "e2e-high"))
		waitRunning(ctx, ns, name)
		fmt.Fprintf(GinkgoWriter, "preemption: high-priority %s create -> Running in %s\n", profile, time.Since(start).Round(time.Millisecond))
		g := gone()
		Expect(g).To(HaveLen(before+victims), "victims of %s: %v", name, g)
		return g
	}
	first := preempt("high-7g", "7g.80gb", 7)
	gpus := map[string]bool{}
	for _, n := range first {
		gpus[gpuOf[n]] = true
	}
	Expect(gpus).To(HaveLen(1), "the seven victims were on one GPU: %v", first)
	second := preempt("high-3g", "3g.40gb", 3)
	var newVictims []string
	for _, n := range second {
		if !gpus[gpuOf[n]] {
			newVictims = append(newVictims, n)
		}
	}
	Expect(newVictims).To(HaveLen(3), "three victims on the other H100: %v", second)
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}
