package engine

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// A scrape while Record runs sees every series that exists before and after it, at its value:
// none missing, none at 0 halfway. Record used to reset its vectors and set them again, and a
// reader in between saw the GPU's free compute at 0 (a test flake and a gap in scrapes).
func TestRecordKeepsSeriesWhileRecording(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	obs, _ := claimNode()
	holder := func(_ *GPU, s Slice) (slicerv1alpha1.SliceState, string, string) {
		if s.MIGUUID == "MIG-held" {
			return slicerv1alpha1.SliceAllocated, "ns", "p"
		}
		return slicerv1alpha1.SliceOrphaned, "", ""
	}
	m.Record(obs, holder)
	free := testutil.ToFloat64(m.FreeCompute.WithLabelValues("0"))
	if free != 3 {
		t.Fatalf("free compute of GPU 0 = %v, want 3 (7 minus the 3g and the 1g)", free)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				m.Record(obs, holder)
			}
		}
	}()
	for range 2000 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]float64{}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				if mf.GetName() == "slicer_agent_gpu_free_compute_slices" && len(mt.GetLabel()) == 1 && mt.GetLabel()[0].GetValue() == "0" {
					seen["free"] = mt.GetGauge().GetValue()
				}
				if mf.GetName() == "slicer_agent_slice_info" {
					seen["info"]++
				}
			}
		}
		if seen["free"] != 3 || seen["info"] != 2 {
			close(stop)
			wg.Wait()
			t.Fatalf("a scrape during Record saw free compute %v and %v slice_info series; want 3 and 2", seen["free"], seen["info"])
		}
	}
	close(stop)
	wg.Wait()

	// A slice that goes away loses its series at the next Record; the others keep theirs.
	obs.GPUs[0].Slices = obs.GPUs[0].Slices[:1]
	m.Record(obs, holder)
	if n := testutil.CollectAndCount(m.SliceInfo); n != 1 {
		t.Errorf("slice_info series after a slice went away = %d, want 1", n)
	}
	if v := testutil.ToFloat64(m.FreeCompute.WithLabelValues("0")); v != 4 {
		t.Errorf("free compute after the 1g went = %v, want 4", v)
	}
}
