// Package rightsize reads, from Prometheus, the pods whose peak framebuffer use fits a smaller
// MIG profile of their GPU, for `slicer right-size`. The series come from the shipped
// slicer.dcgm recording rules (prometheusrules/slicer.rules.yaml): each pod's slices with their
// DCGM exporter framebuffer use, and the agent's step-down chain per GPU (the next smaller
// profile of each profile, from internal/mig). Walking that chain down while the next
// profile still holds the peak gives the smallest profile that fits; Hints is that walk,
// pure, and Query fetches its input.
package rightsize

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// Slice is one pod's slice with its peak framebuffer use over the window.
type Slice struct {
	Namespace, Pod, Node, GPU, Profile, Placement string
	PeakBytes                                     float64
}

// Step is one link of a GPU's step-down chain: Profile's next smaller profile and its memory.
type Step struct {
	Node, GPU, Profile, Smaller string
	SmallerBytes                float64
}

// Hint is a pod's slice whose peak fits a smaller profile: Next is the next smaller one,
// Smallest the smallest that still holds the peak (both nominal memory).
type Hint struct {
	Slice
	Next, Smallest           string
	NextBytes, SmallestBytes float64
}

type stepKey struct{ node, gpu, profile string }

// Hints walks each slice's GPU chain down from its profile while the next profile holds the
// peak; slices whose next smaller profile does not hold it have no hint. Sorted by
// namespace, pod, node, GPU, placement.
func Hints(slices []Slice, steps []Step) []Hint {
	chain := map[stepKey]Step{}
	for _, s := range steps {
		chain[stepKey{s.Node, s.GPU, s.Profile}] = s
	}
	var out []Hint
	for _, s := range slices {
		next, ok := chain[stepKey{s.Node, s.GPU, s.Profile}]
		if !ok || next.SmallerBytes < s.PeakBytes {
			continue
		}
		h := Hint{Slice: s, Next: next.Smaller, NextBytes: next.SmallerBytes, Smallest: next.Smaller, SmallestBytes: next.SmallerBytes}
		// The chain strictly shrinks in memory, so it ends; the bound guards a malformed one.
		for i := 0; i < 16; i++ {
			n, ok := chain[stepKey{s.Node, s.GPU, h.Smallest}]
			if !ok || n.SmallerBytes < s.PeakBytes {
				break
			}
			h.Smallest, h.SmallestBytes = n.Smaller, n.SmallerBytes
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		for _, p := range [][2]string{{a.Namespace, b.Namespace}, {a.Pod, b.Pod}, {a.Node, b.Node}, {a.GPU, b.GPU}, {a.Placement, b.Placement}} {
			if p[0] != p[1] {
				return p[0] < p[1]
			}
		}
		return false
	})
	return out
}

// PeakQuery is the PromQL for each pod's slice's peak framebuffer use over window, limited to
// slices the pod already held window ago (the condition of the shipped hint rule).
func PeakQuery(window time.Duration) string {
	w := promDuration(window)
	return `max_over_time(slice:slicer_dcgm_fb_used_bytes:max{pod!=""}[` + w + `])` +
		` and on (UUID, GPU_I_ID, namespace, pod) (slicer_agent_slice_info offset ` + w + `)`
}

// StepQuery is the PromQL for the agent's step-down chain of every MIG GPU.
const StepQuery = `max by (node, gpu, profile, smaller_profile) (slicer_agent_mig_profile_step_down_memory_bytes)`

func promDuration(d time.Duration) string {
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}

// Query reads the slices' peaks over window and the step-down chains from the Prometheus HTTP
// API at base (e.g. http://prometheus:9090) and returns the hints.
func Query(ctx context.Context, hc *http.Client, base string, window time.Duration) ([]Hint, error) {
	peaks, err := instant(ctx, hc, base, PeakQuery(window))
	if err != nil {
		return nil, err
	}
	stepRes, err := instant(ctx, hc, base, StepQuery)
	if err != nil {
		return nil, err
	}
	var slices []Slice
	for _, r := range peaks {
		m := r.Metric
		slices = append(slices, Slice{Namespace: m["namespace"], Pod: m["pod"], Node: m["node"], GPU: m["gpu"], Profile: m["profile"], Placement: m["placement"], PeakBytes: r.value})
	}
	var steps []Step
	for _, r := range stepRes {
		m := r.Metric
		steps = append(steps, Step{Node: m["node"], GPU: m["gpu"], Profile: m["profile"], Smaller: m["smaller_profile"], SmallerBytes: r.value})
	}
	return Hints(slices, steps), nil
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	value  float64
}

// instant runs an instant query and returns its vector.
func instant(ctx context.Context, hc *http.Client, base, q string) ([]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?"+url.Values{"query": {q}}.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", q, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", q, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("query %s: read: %w", q, err)
	}
	var env struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string   `json:"resultType"`
			Result     []sample `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("query %s: HTTP %d: %w", q, resp.StatusCode, err)
	}
	if env.Status != "success" {
		return nil, fmt.Errorf("query %s: HTTP %d: %s", q, resp.StatusCode, env.Error)
	}
	if env.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %q, want vector", q, env.Data.ResultType)
	}
	for i := range env.Data.Result {
		s, _ := env.Data.Result[i].Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %q: %w", q, s, err)
		}
		env.Data.Result[i].value = v
	}
	return env.Data.Result, nil
}
