package mig

import "sync"

// The per-call buffers of PlanDefrag that grow with the cluster (the per-GPU memo, each
// destination class's per-node verdicts) are taken from pools and handed back when the call
// ends, zeroed when taken again: on 5,000 nodes × 8 GPUs they are about half a megabyte a
// call, and memory fresh from the allocator costs a page fault per 4 KiB the first time the
// search writes it, a large share of a no-plan call's time (docs/benchmarks.md, the planner as
// the scheduler calls it). Reuse changes no answer: a buffer is cleared before use.

// pool is a sync.Pool of slices of T.
type pool[T any] struct{ p sync.Pool }

// get is a zeroed slice of n elements, reused when the pool has one large enough.
func (p *pool[T]) get(n int) []T {
	if b, ok := p.p.Get().(*[]T); ok {
		if cap(*b) >= n {
			s := (*b)[:n]
			clear(s)
			return s
		}
	}
	return make([]T, n)
}

// put hands s back for a later get; s must not be used after.
func (p *pool[T]) put(s []T) {
	if cap(s) > 0 {
		p.p.Put(&s)
	}
}

var (
	memoPool    pool[gpuMemo]
	verdictPool pool[uint8]
)

// release hands the call's pooled buffers back once its search is done (plan).
func (r *defragRun) release() {
	memoPool.put(r.memo)
	r.memo = nil
	for _, ci := range r.classes {
		if ci != nil {
			verdictPool.put(ci.verdict)
			ci.verdict = nil
		}
	}
	for _, ci := range r.classMap {
		verdictPool.put(ci.verdict)
		ci.verdict = nil
	}
}
