package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

// round is one measurement: the latency the goal is about, and the others the same round
// timed, by name, for finding where the time goes.
type round struct {
	latency time.Duration
	parts   []part
}

type part struct {
	name string
	d    time.Duration
}

// finishedRounds measures finished pod → slot reusable. One H100 is held by a pod for the
// whole scenario; each round a 7g.80gb pod that ends after finishSecs takes the other, a
// second 7g.80gb pod is created and seen Unschedulable (no room but the finishing pod's),
// and the latency runs from the watch seeing the first pod Succeeded to the watch seeing the
// second bound. Slicer's PreBind binds a pod only once its SliceAllocation is Ready (the
// agent realized the slice), so bound is the moment the slot is realized for the next pod.
// Its bound → Running (the kubelet starting the container) is printed beside.
func finishedRounds(ctx context.Context, s *scene, rounds int) ([]round, error) {
	const finishSecs = 6
	if err := s.create(ctx, s.slicePod("hold", "7g.80gb")); err != nil {
		return nil, err
	}
	if err := s.running(ctx, "hold"); err != nil {
		return nil, err
	}
	var out []round
	for i := range rounds {
		fin, next := fmt.Sprintf("done-%d", i), fmt.Sprintf("next-%d", i)
		p := builder.Pod(s.ns, fin).RestartNever().
			Container("main", builder.Limits(mig.NVIDIAResourcePrefix+"7g.80gb", "1")).Shell(localnode.FinishedScript("true", finishSecs, 0)).Obj()
		if err := s.create(ctx, p); err != nil {
			return nil, err
		}
		if err := s.running(ctx, fin); err != nil {
			return nil, err
		}
		if err := s.create(ctx, s.slicePod(next, "7g.80gb")); err != nil {
			return nil, err
		}
		st, err := s.w.waitFor(ctx, next, "Unschedulable", s.timeout, func(x seen) bool { return isUnschedulable(x) || isBound(x) })
		if err != nil {
			return nil, err
		}
		fs := s.w.get(fin)
		if isBound(st) || !fs.finished.IsZero() {
			return nil, fmt.Errorf("round %d: %s was not made to wait for %s's slot (bound %v, %s finished %v): raise finishSecs", i, next, fin, isBound(st), fin, !fs.finished.IsZero())
		}
		if err := s.running(ctx, next); err != nil {
			return nil, err
		}
		fs, ns := s.w.get(fin), s.w.get(next)
		if fs.finished.IsZero() || ns.bound.Before(fs.finished) {
			return nil, fmt.Errorf("round %d: %s bound before %s was seen finished", i, next, fin)
		}
		out = append(out, round{latency: ns.bound.Sub(fs.finished), parts: []part{
			{"finished→Running", ns.running.Sub(fs.finished)},
			{"bound→Running", ns.running.Sub(ns.bound)},
		}})
		if err := s.remove(ctx, fin, next); err != nil {
			return nil, err
		}
	}
	return out, s.remove(ctx, "hold")
}

// preemptRounds measures preemptor create → Running. Low-priority pods fill every GPU
// (7g.80gb on the H100s, 7g.40gb on the A100s: no free placement); each round a
// high-priority 7g.80gb pod is created and needs one H100 pod's room. The latency runs from
// just before the create call to the watch seeing the preemptor Running; the victim has a
// 1 s grace period and exits on SIGTERM at once. Each round refills what the last one
// evicted.
func preemptRounds(ctx context.Context, s *scene, rounds int) ([]round, error) {
	classes := map[string]int32{"bench-latency-low": -10, "bench-latency-high": 1000000}
	for name, v := range classes {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
		if err := client.IgnoreAlreadyExists(s.c.Create(ctx, pc)); err != nil {
			return nil, fmt.Errorf("priority class %s: %w", name, err)
		}
		defer func() { _ = s.c.Delete(context.WithoutCancel(ctx), pc) }()
	}
	pod := func(name, profile, class string) *corev1.Pod {
		p := s.slicePod(name, profile)
		p.Spec.PriorityClassName = class
		return p
	}
	fill := map[string]string{"h0": "7g.80gb", "h1": "7g.80gb", "a0": "7g.40gb", "a1": "7g.40gb"}
	live := map[string]string{} // fill key → the pod name holding it now
	var out []round
	for i := range rounds {
		for k, profile := range fill {
			if n, ok := live[k]; ok {
				var p corev1.Pod
				err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: n}, &p)
				if err == nil && p.DeletionTimestamp == nil {
					continue
				}
				if client.IgnoreNotFound(err) != nil {
					return nil, fmt.Errorf("get pod %s: %w", n, err)
				}
			}
			n := fmt.Sprintf("low-%s-%d", k, i)
			if err := s.create(ctx, pod(n, profile, "bench-latency-low")); err != nil {
				return nil, err
			}
			live[k] = n
		}
		for _, n := range live {
			if err := s.running(ctx, n); err != nil {
				return nil, err
			}
		}
		high := fmt.Sprintf("high-%d", i)
		if err := s.create(ctx, pod(high, "7g.80gb", "bench-latency-high")); err != nil {
			return nil, err
		}
		if err := s.running(ctx, high); err != nil {
			return nil, err
		}
		hs := s.w.get(high)
		r := round{latency: hs.running.Sub(hs.created), parts: []part{
			{"create→bound", hs.bound.Sub(hs.created)},
			{"bound→Running", hs.running.Sub(hs.bound)},
		}}
		var victim seen
		for _, n := range live {
			if v := s.w.get(n); isGone(v) && (victim.gone.IsZero() || v.gone.Before(victim.gone)) {
				victim = v
			}
		}
		if !victim.gone.IsZero() {
			r.parts = append(r.parts, part{"create→victim gone", victim.gone.Sub(hs.created)})
		}
		out = append(out, r)
		if err := s.remove(ctx, high); err != nil {
			return nil, err
		}
	}
	var names []string
	for _, n := range live {
		names = append(names, n)
	}
	return out, s.remove(ctx, names...)
}

// defragRounds measures defragmentation plan → pending pod Running (Evict mode). The A100s
// are kept full; each round places one replica of a 1g.10gb Deployment on each H100 (as
// test/e2e's defragmentation spec does: a pod holds one H100 while the first replica lands on
// the other, fillers pack that one while the second replica lands on the first), then
// creates a 7g.80gb pod, which fits only if a replica moves. The latency runs from the watch
// seeing the plan record (condition slicer.dev/DefragmentationPlan, written by the scheduler
// before its evictions) on the pending pod to the watch seeing that pod Running.
func defragRounds(ctx context.Context, s *scene, rounds int) ([]round, error) {
	for _, n := range []string{"a100-0", "a100-1"} {
		if err := s.create(ctx, s.slicePod(n, "7g.40gb")); err != nil {
			return nil, err
		}
	}
	if err := s.running(ctx, "a100-0", "a100-1"); err != nil {
		return nil, err
	}
	labels := map[string]string{"app": "web"}
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       s.slicePod("x", "1g.10gb").Spec,
			},
		},
	}
	web.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if err := s.c.Create(ctx, web); err != nil {
		return nil, fmt.Errorf("deployment: %w", err)
	}
	var out []round
	for i := range rounds {
		if err := arrangeFragments(ctx, s, web, i); err != nil {
			return nil, fmt.Errorf("round %d: arranging: %w", i, err)
		}
		replicas, err := webGPUs(ctx, s)
		if err != nil {
			return nil, err
		}
		big := fmt.Sprintf("big-%d", i)
		if err := s.create(ctx, s.slicePod(big, "7g.80gb")); err != nil {
			return nil, err
		}
		if err := s.running(ctx, big); err != nil {
			return nil, err
		}
		bs := s.w.get(big)
		if bs.planned.IsZero() {
			return nil, fmt.Errorf("round %d: %s ran without a plan record: the scene was not fragmented", i, big)
		}
		r := round{latency: bs.running.Sub(bs.planned), parts: []part{
			{"create→plan", bs.planned.Sub(bs.created)},
			{"plan→bound", bs.bound.Sub(bs.planned)},
			{"create→Running", bs.running.Sub(bs.created)},
		}}
		for n := range replicas {
			if m := s.w.get(n); isGone(m) {
				r.parts = append(r.parts, part{"plan→moved pod evicted", m.deleting.Sub(bs.planned)},
					part{"plan→moved pod gone", m.gone.Sub(bs.planned)})
			}
		}
		out = append(out, r)
		if err := s.remove(ctx, big); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// arrangeFragments scales web to 0, then leaves one Running replica on each H100.
func arrangeFragments(ctx context.Context, s *scene, web *appsv1.Deployment, i int) error {
	if err := scale(ctx, s, web, 0); err != nil {
		return err
	}
	hold := fmt.Sprintf("hold-%d", i)
	if err := s.create(ctx, s.slicePod(hold, "7g.80gb")); err != nil {
		return err
	}
	if err := s.running(ctx, hold); err != nil {
		return err
	}
	if err := scale(ctx, s, web, 1); err != nil {
		return err
	}
	if err := s.remove(ctx, hold); err != nil {
		return err
	}
	first, err := webGPUs(ctx, s)
	if err != nil {
		return err
	}
	var fillers []string
	for j := range 6 {
		n := fmt.Sprintf("fill-%d-%d", i, j)
		if err := s.create(ctx, s.slicePod(n, "1g.10gb")); err != nil {
			return err
		}
		fillers = append(fillers, n)
	}
	if err := s.running(ctx, fillers...); err != nil {
		return err
	}
	if err := scale(ctx, s, web, 2); err != nil {
		return err
	}
	if err := s.remove(ctx, fillers...); err != nil {
		return err
	}
	gpus, err := webGPUs(ctx, s)
	if err != nil {
		return err
	}
	distinct := map[string]bool{}
	for _, g := range gpus {
		distinct[g] = true
	}
	if len(gpus) != 2 || len(distinct) != 2 {
		return fmt.Errorf("want one replica on each H100, got %v (the first on %v)", gpus, first)
	}
	return nil
}

// scale sets web's replicas and waits until exactly that many of its pods, none being
// deleted, are Running.
func scale(ctx context.Context, s *scene, web *appsv1.Deployment, n int32) error {
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
		return fmt.Errorf("get deployment: %w", err)
	}
	web.Spec.Replicas = ptr.To(n)
	if err := s.c.Update(ctx, web); err != nil {
		return fmt.Errorf("scale deployment to %d: %w", n, err)
	}
	return s.poll(ctx, fmt.Sprintf("%d web replicas Running, no other", n), func() (bool, error) {
		var l corev1.PodList
		if err := s.c.List(ctx, &l, client.InNamespace(s.ns), client.MatchingLabels{"app": "web"}); err != nil {
			return false, err
		}
		running := int32(0)
		for _, p := range l.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
			running++
		}
		return running == n, nil
	})
}

// webGPUs is the GPU of each Running web replica.
func webGPUs(ctx context.Context, s *scene) (map[string]string, error) {
	var l corev1.PodList
	if err := s.c.List(ctx, &l, client.InNamespace(s.ns), client.MatchingLabels{"app": "web"}); err != nil {
		return nil, fmt.Errorf("list web: %w", err)
	}
	out := map[string]string{}
	for _, p := range l.Items {
		g, err := s.gpuOf(ctx, p.Name)
		if err != nil {
			return nil, err
		}
		out[p.Name] = g
	}
	return out, nil
}
