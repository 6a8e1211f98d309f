package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// hist is a snapshot of one or more histogram series summed: cumulative
// bucket counts by upper bound, total count and sum.
type hist struct {
	bounds []float64
	cum    []float64
	count  float64
	sum    float64
}

// gather sums the histogram series called name whose label key has value
// (key "" for all series).
func gather(g prometheus.Gatherer, name, key, value string) hist {
	var h hist
	mfs, err := g.Gather()
	if err != nil {
		return h
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ph := m.GetHistogram()
			if ph == nil || (key != "" && label(m, key) != value) {
				continue
			}
			h.count += float64(ph.GetSampleCount())
			h.sum += ph.GetSampleSum()
			if h.bounds == nil {
				for _, b := range ph.GetBucket() {
					h.bounds = append(h.bounds, b.GetUpperBound())
					h.cum = append(h.cum, 0)
				}
			}
			for i, b := range ph.GetBucket() {
				if i < len(h.cum) {
					h.cum[i] += float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return h
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// minus is h − before (the observations made in between).
func (h hist) minus(before hist) hist {
	out := hist{bounds: h.bounds, count: h.count - before.count, sum: h.sum - before.sum}
	out.cum = make([]float64, len(h.cum))
	for i := range h.cum {
		out.cum[i] = h.cum[i]
		if i < len(before.cum) {
			out.cum[i] -= before.cum[i]
		}
	}
	return out
}

func (h hist) mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return seconds(h.sum / h.count)
}

// quantileText is quantile, with "≥" when it lies beyond the last finite bucket.
func (h hist) quantileText(q float64) string {
	d := h.quantile(q)
	if h.count > 0 && len(h.bounds) > 1 && h.cum[len(h.cum)-2] < q*h.count {
		return "≥" + ms(d)
	}
	return ms(d)
}

// quantile interpolates linearly inside the bucket that holds rank q, as
// PromQL's histogram_quantile does; beyond the last finite bound it
// returns that bound.
func (h hist) quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	rank := q * h.count
	lower, prev := 0.0, 0.0
	for i, b := range h.bounds {
		if h.cum[i] >= rank {
			if math.IsInf(b, 1) {
				return seconds(lower)
			}
			inBucket := h.cum[i] - prev
			if inBucket == 0 {
				return seconds(b)
			}
			return seconds(lower + (b-lower)*(rank-prev)/inBucket)
		}
		lower, prev = b, h.cum[i]
	}
	return seconds(lower)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

// heapAfterGC is the live heap once two collections have run.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// diff returns after − before for every positive key.
func diff(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// perPod renders counts divided by pods, sorted by key.
func perPod(writes map[string]int, pods int) string {
	keys := make([]string, 0, len(writes))
	for k := range writes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, float64(writes[k])/float64(pods)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func total(writes map[string]int) int {
	n := 0
	for _, v := range writes {
		n += v
	}
	return n
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, f func(int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	ch := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		ch <- i
	}
	close(ch)
	wg.Wait()
	return first
}

// writeHeapProfile writes a pprof heap profile (after heapAfterGC's collections).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}
