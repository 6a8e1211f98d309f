package mig

// SliceIndex is what a caller of PlanDefrag keeps of the slices its MovableFunc answered yes
// for (the scheduler plugin: the movable pod found at each, scheduler/plugin/defrag.go), so
// that its DestinationFunc and DestinationClass, asked about a moved slice later in the same
// call, find it again: a list per node threaded through one slice, filled without an
// allocation per node and read back without hashing a slot (a plan on 5,000 nodes × 8 GPUs asks
// about some 10,000 slices). Reset empties it for the next call and keeps its memory: memory
// fresh from the allocator costs a page fault per 4 KiB the first time it is written, a large
// share of a no-plan call's time (docs/benchmarks.md, "Where a no-plan call's time goes"), so a
// caller that plans often keeps its SliceIndex between calls, one per call in flight.
type SliceIndex[T any] struct {
	// head: per node, 1 + the index in found of the node's last entry, 0 when none.
	head  []int32
	found []sliceFound[T]
}

// sliceFound is an entry of a SliceIndex: the slice's GPU index on its node and its
// placement's start, 1 + the index of the node's entry added before it (0: none), and what was
// found there.
type sliceFound[T any] struct {
	gpu, start, prev int32
	v                T
}

// Reset empties x for a call on nodes nodes, keeping its memory; what was added is no longer
// referenced from it.
func (x *SliceIndex[T]) Reset(nodes int) {
	clear(x.found)
	x.found = x.found[:0]
	if cap(x.head) < nodes {
		x.head = make([]int32, nodes)
		return
	}
	x.head = x.head[:nodes]
	clear(x.head)
}

// Add records v at the slice of node's GPU gpu whose placement starts at start; node is below
// the count given to Reset, and the slice was not added since.
func (x *SliceIndex[T]) Add(node, gpu, start int, v T) {
	x.found = append(x.found, sliceFound[T]{gpu: int32(gpu), start: int32(start), prev: x.head[node], v: v})
	x.head[node] = int32(len(x.found))
}

// At is what was added at the slice s since Reset, and whether anything was.
func (x *SliceIndex[T]) At(s SliceAt) (T, bool) {
	if s.Node >= 0 && s.Node < len(x.head) {
		for i := x.head[s.Node]; i != 0; {
			f := &x.found[i-1]
			if int(f.gpu) == s.GPU && int(f.start) == s.Placement.Start {
				return f.v, true
			}
			i = f.prev
		}
	}
	var zero T
	return zero, false
}
