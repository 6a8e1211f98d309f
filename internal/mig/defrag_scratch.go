package mig

import "sync"

// The per-call buffers of PlanDefrag that grow with the cluster or the model's state table (the
// per-GPU memo, the opening sets per state, each destination class with its per-node
// verdicts) are taken from pools and handed back when the call ends, zeroed when taken again:
// on 5,000 nodes × 8 GPUs they are about 600 KB a call, and memory fresh from the allocator
// costs a page fault per 4 KiB the first time the search writes it, a large share of a no-plan
// call's time (docs/benchmarks.md, "Where a no-plan call's time goes"). Reuse changes no
// answer: a buffer is zeroed before use.

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
	osetsPool   pool[openSets]
	verdictPool pool[uint8]
	classPool   sync.Pool // of *classInfo
)

// newClassInfo is a zeroed classInfo, reused when the pool has one.
func newClassInfo() *classInfo {
	if ci, ok := classPool.Get().(*classInfo); ok {
		*ci = classInfo{}
		return ci
	}
	return &classInfo{}
}

// putClass hands ci and its verdicts back.
func putClass(ci *classInfo) {
	verdictPool.put(ci.verdict)
	*ci = classInfo{}
	classPool.Put(ci)
}

// release hands the call's pooled buffers back once its search is done (plan).
func (r *defragRun) release() {
	memoPool.put(r.memo)
	r.memo = nil
	for m := range r.osets {
		osetsPool.put(r.osets[m])
		r.osets[m] = nil
	}
	for i, ci := range r.classes {
		if ci != nil {
			putClass(ci)
			r.classes[i] = nil
		}
	}
	for k, ci := range r.classMap {
		putClass(ci)
		delete(r.classMap, k)
	}
}
