package plugin

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
	"github.com/slicer-operator/slicer/test/builder"
)

// crowdedPlugin is a plugin (Recommend) on nodes × 8 H100s where a 4g.40gb has no plan: every
// GPU holds 2g.20gb@0, 2g.20gb@2 and 3g.40gb@4, each the slice of a running ReplicaSet pod
// (movable; half of them select their node's zone, one of four), except GPU 0 of every 50th
// node, which lacks its 2g.20gb@2; those nodes, the only room for a moved slice, are
// cordoned. The planner then examines every GPU (two removals open each) and moves nothing.
func crowdedPlugin(b *testing.B, nodes int) *Plugin {
	b.Helper()
	m, err := NewMetrics(nil)
	if err != nil {
		b.Fatal(err)
	}
	p := &Plugin{metrics: m, cache: snapshot.New(logr.Discard(), m), rejected: map[types.UID]*corev1.Pod{}, held: newNominations(),
		prebindFailed: map[types.UID]bool{}}
	pol, err := newDefragPolicy(recommend)
	if err != nil {
		b.Fatal(err)
	}
	p.defrag = testDefragmenter(p, pol)
	p.defrag.recorder = events.NewFakeRecorder(10)
	byNS := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	pods, nodeIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, byNS), cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	nsIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	p.pods = corelisters.NewPodLister(pods)
	p.defrag.pods, p.defrag.nodes, p.defrag.namespaces = p.pods, corelisters.NewNodeLister(nodeIdx), corelisters.NewNamespaceLister(nsIdx)
	p.defrag.pdbs = policylisters.NewPodDisruptionBudgetLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, byNS))
	slots := []struct {
		profile     string
		start, size int
	}{{"2g.20gb", 0, 2}, {"2g.20gb", 2, 2}, {"3g.40gb", 4, 4}}
	for n := range nodes {
		name := fmt.Sprintf("node-%05d", n)
		zone := fmt.Sprintf("zone-%d", n*4/nodes)
		room := n%50 == 0
		node := builder.Node(name).Label("zone", zone).Obj()
		node.Spec.Unschedulable = room
		if err := nodeIdx.Add(node); err != nil {
			b.Fatal(err)
		}
		na := accel(name, 8)
		for g, gpu := range na.Status.GPUs {
			for i, s := range slots {
				if room && g == 0 && i == 1 {
					continue
				}
				pn := fmt.Sprintf("%s-%d-%d", name, g, i)
				pod := ownedBy("ReplicaSet", builder.Pod("ns", pn).UID("uid-"+pn).Node(name).Label("app", "web").
					Container("c", builder.Limits(mig.ResourceName(s.profile), "1")).Obj())
				if (n+g+i)%2 == 0 {
					pod.Spec.NodeSelector = map[string]string{"zone": zone}
				}
				if err := pods.Add(pod); err != nil {
					b.Fatal(err)
				}
				p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: pn, PodName: pn, PodUID: pod.UID, NodeName: name,
					Slot: snapshot.Slot{Slot: mig.Slot{GPU: gpu.UUID, Profile: s.profile, Placement: mig.Placement{Start: s.start, Size: s.size}}}})
			}
		}
		p.cache.SetNodeAccelerator(na)
	}
	return p
}

// cpuNow is the process's user and system CPU time.
func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDefragMemo measures PostFilter (PreFilter first, as each attempt runs it) of
// pending 4g.40gb pods on crowdedPlugin's 5,000 nodes × 8 H100s, where no plan exists, in one
// process: "search", attempts whose inputs changed before each one (every attempt runs the
// planner, as before the memo); "round", a retry round of 100 pending pods after one change
// (the first runs the planner, the others reuse its answer); "reuse", the same round again with
// nothing changed (every attempt reuses: what PostFilter costs besides the planner). It reports
// the CPU time (user + system, the process's: the garbage collector's work included) and the
// wall time per attempt of each, and the ratio of search to round CPU per attempt.
func BenchmarkDefragMemo(b *testing.B) {
	const nodes, searched, round = 5000, 10, 100
	p := crowdedPlugin(b, nodes)
	ctx := context.Background()
	attempt := func(pod *corev1.Pod) string {
		cs := framework.NewCycleState()
		if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
			b.Fatal(st)
		}
		_, st := p.PostFilter(ctx, cs, pod, nil)
		return st.Message()
	}
	searches := func() uint64 {
		var m dto.Metric
		if err := p.metrics.DefragPlanDuration.Write(&m); err != nil {
			b.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	pending := make([]*corev1.Pod, round)
	for i := range pending {
		pending[i] = pendingPod("ns", fmt.Sprintf("big-%03d", i), "4g.40gb")
	}
	if msg := attempt(pending[0]); !strings.Contains(msg, "defragmentation found no plan") {
		b.Fatalf("the crowded cluster's answer: %q, want no plan", msg)
	}
	var cpuSearch, cpuRound, cpuReuse, wallSearch, wallRound, wallReuse time.Duration
	attemptsSearch, attemptsRound := 0, 0
	for b.Loop() {
		before := searches()
		c0, w0 := cpuNow(b), time.Now()
		for _, pod := range pending[:searched] {
			p.defrag.inputs.Add(1) // a change before every attempt: nothing to reuse
			attempt(pod)
		}
		cpuSearch += cpuNow(b) - c0
		wallSearch += time.Since(w0)
		attemptsSearch += searched
		if n := searches() - before; n != searched {
			b.Fatalf("%d searches for %d attempts after changes", n, searched)
		}

		before = searches()
		p.defrag.inputs.Add(1) // one change, then the round
		c0, w0 = cpuNow(b), time.Now()
		for _, pod := range pending {
			attempt(pod)
		}
		cpuRound += cpuNow(b) - c0
		wallRound += time.Since(w0)
		attemptsRound += round
		if n := searches() - before; n != 1 {
			b.Fatalf("%d searches in a round of %d attempts after one change, want 1", n, round)
		}

		c0, w0 = cpuNow(b), time.Now()
		for _, pod := range pending { // nothing changed: every attempt reuses
			attempt(pod)
		}
		cpuReuse += cpuNow(b) - c0
		wallReuse += time.Since(w0)
		if n := searches() - before; n != 1 {
			b.Fatalf("%d searches in two rounds with one change before them, want 1", n)
		}
	}
	perSearch := float64(cpuSearch) / float64(attemptsSearch) / 1e6
	perRound := float64(cpuRound) / float64(attemptsRound) / 1e6
	b.ReportMetric(perSearch, "cpu-ms/attempt-search")
	b.ReportMetric(perRound, "cpu-ms/attempt-round")
	b.ReportMetric(float64(wallSearch)/float64(attemptsSearch)/1e6, "wall-ms/attempt-search")
	b.ReportMetric(float64(wallRound)/float64(attemptsRound)/1e6, "wall-ms/attempt-round")
	b.ReportMetric(float64(cpuReuse)/float64(attemptsRound)/1e6, "cpu-ms/attempt-reuse")
	b.ReportMetric(float64(wallReuse)/float64(attemptsRound)/1e6, "wall-ms/attempt-reuse")
	b.ReportMetric(perSearch/perRound, "cpu-ratio")
}
