package localnode

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/internal/slicemap"
)

// WaitForTerm ends a container script that then runs until it is stopped: it exits 0 on
// SIGTERM, so a deleted pod goes at once rather than after its grace period.
const WaitForTerm = "; trap 'exit 0' TERM; sleep 86400 & wait"

// FinishedScript is a container script that prints what it got (print), then ends after
// secs seconds with the exit code: 0 makes a pod of restartPolicy Never Succeeded, any
// other Failed.
func FinishedScript(print string, secs, code int) string {
	return fmt.Sprintf("%s; sleep %d; exit %d", print, secs, code)
}

// Reuse is what FinishedToReuse measured.
type Reuse struct {
	// Finished: when each finishing pod was first seen Succeeded or Failed, by name.
	Finished map[string]time.Time
	// Bound: when each waiting pod was first seen bound to a node, by name.
	Bound map[string]time.Time
	// Latencies pair the i-th finish with the i-th binding, both in time order: how long
	// after a pod finished the next one got its room.
	Latencies []time.Duration
}

// FinishedToReuse polls every 50 ms until every pod of finishing is Succeeded or Failed and
// every pod of waiting is bound, and measures finished → bound. A waiting pod bound before
// the first finish fails the spec: it did not wait for the room the finishing pods held.
func FinishedToReuse(ctx context.Context, c client.Client, ns string, finishing, waiting []string, timeout time.Duration) Reuse {
	r := Reuse{Finished: map[string]time.Time{}, Bound: map[string]time.Time{}}
	gomega.Eventually(func(g gomega.Gomega) {
		now := time.Now()
		var l corev1.PodList
		g.Expect(c.List(ctx, &l, client.InNamespace(ns))).To(gomega.Succeed())
		for _, p := range l.Items {
			_, seen := r.Finished[p.Name]
			if slices.Contains(finishing, p.Name) && !seen && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
				r.Finished[p.Name] = now
			}
			_, seen = r.Bound[p.Name]
			if slices.Contains(waiting, p.Name) && !seen && p.Spec.NodeName != "" {
				r.Bound[p.Name] = now
			}
		}
		g.Expect(r.Finished).To(gomega.HaveLen(len(finishing)), "finished")
		g.Expect(r.Bound).To(gomega.HaveLen(len(waiting)), "bound")
	}).WithContext(ctx).WithPolling(50 * time.Millisecond).WithTimeout(timeout).Should(gomega.Succeed())
	fin, bound := sortedTimes(r.Finished), sortedTimes(r.Bound)
	gomega.Expect(bound[0]).NotTo(gomega.BeTemporally("<", fin[0]), "a waiting pod was bound before any finishing pod finished: %v, %v", r.Finished, r.Bound)
	for i := range min(len(fin), len(bound)) {
		r.Latencies = append(r.Latencies, bound[i].Sub(fin[i]))
	}
	return r
}

func sortedTimes(m map[string]time.Time) []time.Time {
	out := make([]time.Time, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// FinishedHolders lists, as `slicer slice-map` reads the cluster, every slice, allocation or
// claim still held for a pod that is Succeeded or Failed: none once the node has settled.
func FinishedHolders(ctx context.Context, c client.Reader) ([]string, error) {
	in, err := slicemap.Fetch(ctx, c, "")
	if err != nil {
		return nil, err
	}
	m := slicemap.Build(in, slicemap.Options{})
	var out []string
	check := func(where string, p *slicemap.Pod) {
		if p != nil && !p.UIDMismatch && (p.Phase == string(corev1.PodSucceeded) || p.Phase == string(corev1.PodFailed)) {
			out = append(out, fmt.Sprintf("%s is held by %s/%s (%s)", where, p.Namespace, p.Name, p.Phase))
		}
	}
	for _, n := range m.Nodes {
		for _, g := range n.GPUs {
			for _, s := range g.Slices {
				where := fmt.Sprintf("node %s GPU %s slice %s@%d", n.Name, g.UUID, s.Profile, s.Start)
				if s.Allocation != nil {
					check(where, s.Allocation.Pod)
				}
				if s.Claim != nil {
					for i := range s.Claim.Pods {
						check(where, &s.Claim.Pods[i])
					}
				}
			}
		}
		for _, a := range n.Unrealized {
			check("allocation "+a.Namespace+"/"+a.Name, a.Pod)
		}
		for _, cl := range n.Unprepared {
			for i := range cl.Pods {
				check("claim "+cl.Namespace+"/"+cl.Name, &cl.Pods[i])
			}
		}
	}
	return out, nil
}
