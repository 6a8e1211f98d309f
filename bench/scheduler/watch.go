package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// boundWatch counts the pods of a namespace that have a node, from a watch
// (no LIST while the scheduler runs). It keeps names and times only, not
// the pods, so that it weighs little in the heap measurement.
type boundWatch struct {
	mu      sync.Mutex
	created map[string]time.Time // set by the creator just before Create
	bound   map[string]time.Time // first time the watch saw spec.nodeName
	changed chan struct{}
	err     error
	done    chan struct{}
}

func startBoundWatch(ctx context.Context, cs kubernetes.Interface, ns string) (*boundWatch, error) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch pods: %w", err)
	}
	w := &boundWatch{created: map[string]time.Time{}, bound: map[string]time.Time{}, changed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer rw.Stop()
		for ev := range rw.ResultChan() {
			if ev.Type == watch.Error {
				w.mu.Lock()
				w.err = fmt.Errorf("pod watch: %v", ev.Object)
				w.mu.Unlock()
				return
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Spec.NodeName == "" {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			if _, seen := w.bound[p.Name]; !seen {
				w.bound[p.Name] = now
				close(w.changed)
				w.changed = make(chan struct{})
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

func (w *boundWatch) markCreated(name string) {
	w.mu.Lock()
	w.created[name] = time.Now()
	w.mu.Unlock()
}

// wait returns once n pods are bound, or the timeout passes.
func (w *boundWatch) wait(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		have, changed, err := len(w.bound), w.changed, w.err
		w.mu.Unlock()
		if err != nil {
			return err
		}
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-w.done:
			return fmt.Errorf("pod watch ended with %d of %d pods bound", have, n)
		case <-deadline.C:
			return fmt.Errorf("%d of %d pods bound after %s", have, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// latencies returns create → bound of the named pods, sorted, and the
// last bind time among them.
func (w *boundWatch) latencies(prefix string) ([]time.Duration, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	var last time.Time
	for name, c := range w.created {
		if len(name) < len(prefix) || name[:len(prefix)] != prefix {
			continue
		}
		if b, ok := w.bound[name]; ok {
			out = append(out, b.Sub(c))
			if b.After(last) {
				last = b
			}
		}
	}
	sortDurations(out)
	return out, last
}

// nthBound is when the n-th pod (1-based) was seen bound.
func (w *boundWatch) nthBound(n int) time.Time {
	w.mu.Lock()
	times := make([]time.Time, 0, len(w.bound))
	for _, t := range w.bound {
		times = append(times, t)
	}
	w.mu.Unlock()
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	if n < 1 || n > len(times) {
		return time.Time{}
	}
	return times[n-1]
}
