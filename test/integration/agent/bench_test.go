package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// benchNode starts a control plane and an emulated node's agent for a benchmark.
// podGone turns on the agent's release of allocations whose pod is gone or finished.
func benchNode(b *testing.B, name string, gpus int, podGone ...bool) (*framework.Env, *engine.Metrics) {
	b.Helper()
	e, err := framework.Start(framework.Options{WithoutExternalCRDs: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Stop(); err != nil {
			b.Error(err)
		}
	})
	c := e.Client
	bg := context.Background()
	if err := c.Create(bg, framework.MakeNamespace("bench")); err != nil {
		b.Fatal(err)
	}
	if err := c.Create(bg, builder.Node(name).Obj()); err != nil {
		b.Fatal(err)
	}
	models := make([]mig.Model, gpus)
	for i := range models {
		models[i] = mig.H100_80GB
	}
	be, err := emulated.New(emulated.Options{Node: name, GPUs: models})
	if err != nil {
		b.Fatal(err)
	}
	m := engine.NewMetrics(prometheus.NewRegistry())
	log := logr.Discard()
	if os.Getenv("BENCH_LOG") != "" {
		log = zap.New(zap.UseDevMode(true))
	}
	ctrllog.SetLogger(log)
	a, err := e.StartAgent(framework.AgentOptions{Node: name, Library: be, CDIDir: filepath.Join(b.TempDir(), "cdi"), OrphanGrace: time.Hour, Metrics: m,
		PodGone: len(podGone) > 0 && podGone[0]}, log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := a.Stop(); err != nil {
			b.Error(err)
		}
	})
	// Measure the steady state: wait for the agent's first publication.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var na slicerv1alpha1.NodeAccelerator
		if err := c.Get(bg, client.ObjectKey{Name: name}, &na); err == nil && framework.NodeConditionStatus(&na, slicerv1alpha1.ConditionReady) == metav1.ConditionTrue {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the agent did not publish its NodeAccelerator")
		}
	}
	return e, m
}

func benchAlloc(node string, i, gpu int, start int32) *slicerv1alpha1.SliceAllocation {
	name := fmt.Sprintf("b%d-g%d-s%d", i, gpu, start)
	a := framework.MakeSliceAllocation("bench", name).Node(node).GPU(emulated.GPUUUID(node, gpu)).Profile("1g.10gb", start, 1).
		Pod(name, fmt.Sprintf("00000000-0000-4000-8000-%012d", i*100+gpu*10+int(start))).Obj()
	a.Labels = map[string]string{slicerv1alpha1.LabelNode: node}
	return a
}

// waitAll polls until every allocation of the node is Ready (ready=true) or gone.
func waitAll(b *testing.B, c client.Client, node string, n int, ready bool) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		items, err := framework.ListAllocations(context.Background(), c, node)
		if err != nil {
			b.Fatal(err)
		}
		count := 0
		for _, a := range items {
			if a.Status.State == slicerv1alpha1.AllocationReady {
				count++
			}
		}
		if (ready && count == n) || (!ready && len(items) == 0) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("node %s did not settle (ready=%v)", node, ready)
}

func create(b *testing.B, c client.Client, allocs []*slicerv1alpha1.SliceAllocation) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(allocs))
	sem := make(chan struct{}, 8)
	for _, a := range allocs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := c.Create(context.Background(), a); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func deleteAll(b *testing.B, c client.Client, allocs []*slicerv1alpha1.SliceAllocation) {
	b.Helper()
	for _, a := range allocs {
		if err := c.Delete(context.Background(), a); err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
	}
}

func agentRealizeMean(m *engine.Metrics) float64 {
	ch := make(chan prometheus.Metric, 1)
	m.RealizeDuration.Collect(ch)
	var out dto.Metric
	if err := (<-ch).Write(&out); err != nil || out.GetHistogram().GetSampleCount() == 0 {
		return 0
	}
	h := out.GetHistogram()
	return h.GetSampleSum() / float64(h.GetSampleCount())
}

// BenchmarkRealizeOne: one 1g allocation created → Ready (end to end through
// the apiserver) on an idle 1-GPU emulated node, then released.
func BenchmarkRealizeOne(b *testing.B) {
	e, m := benchNode(b, "bench-one", 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a := benchAlloc("bench-one", i, 0, 0)
		create(b, e.Client, []*slicerv1alpha1.SliceAllocation{a})
		waitAll(b, e.Client, "bench-one", 1, true)
		b.StopTimer()
		deleteAll(b, e.Client, []*slicerv1alpha1.SliceAllocation{a})
		waitAll(b, e.Client, "bench-one", 0, false)
		b.StartTimer()
	}
	b.ReportMetric(agentRealizeMean(m)*1e3, "agent-seen-to-ready-ms")
}

// BenchmarkBurst56 is a burst of 56 × 1g.10gb allocations (7 per GPU) on an
// 8 × H100-80GB emulated node, from the first create to all Ready.
func BenchmarkBurst56(b *testing.B) {
	e, m := benchNode(b, "bench-burst", 8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var allocs []*slicerv1alpha1.SliceAllocation
		for g := 0; g < 8; g++ {
			for s := int32(0); s < 7; s++ {
				allocs = append(allocs, benchAlloc("bench-burst", i, g, s))
			}
		}
		create(b, e.Client, allocs)
		waitAll(b, e.Client, "bench-burst", 56, true)
		b.StopTimer()
		deleteAll(b, e.Client, allocs)
		waitAll(b, e.Client, "bench-burst", 0, false)
		b.StartTimer()
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/burst")
	b.ReportMetric(agentRealizeMean(m)*1e3, "agent-seen-to-ready-ms")
}
