package framework

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// sliceReporter writes the fake agent's slices into NodeAccelerator status,
// coalescing the changes of one node into at most one write per interval.
type sliceReporter struct {
	client   client.Client
	reader   client.Reader
	interval time.Duration
	due      chan string   // nodes whose coalescing delay has passed
	stopped  chan struct{} // closed when run returns
	wg       sync.WaitGroup

	mu    sync.Mutex
	nodes map[string]*nodeReport
}

// nodeReport is one node's pending changes, keyed by allocation.
type nodeReport struct {
	pending   map[types.NamespacedName]sliceChange
	scheduled bool
	last      time.Time
}

type sliceChange struct {
	present bool
	gpu     string
	slice   slicerv1alpha1.MIGSlice
}

func newSliceReporter(c client.Client, r client.Reader, interval time.Duration) *sliceReporter {
	return &sliceReporter{client: c, reader: r, interval: interval, due: make(chan string),
		stopped: make(chan struct{}), nodes: map[string]*nodeReport{}}
}

// run flushes each node when its delay has passed, until ctx ends.
func (r *sliceReporter) run(ctx context.Context) {
	defer close(r.stopped)
	for {
		select {
		case node := <-r.due:
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.flush(ctx, node)
			}()
		case <-ctx.Done():
			return
		}
	}
}

// set records that the allocation's slice is (present) or is no longer on its GPU.
func (r *sliceReporter) set(sa *slicerv1alpha1.SliceAllocation, present bool) {
	key := types.NamespacedName{Namespace: sa.Namespace, Name: sa.Name}
	ch := sliceChange{present: present, gpu: sa.Spec.GPUUUID, slice: slicerv1alpha1.MIGSlice{
		Profile: sa.Spec.Profile, Placement: migapi.APIPlacement(migapi.SlotAsWritten(&sa.Spec).Placement), MIGDeviceUUID: FakeMIGUUID(sa),
		State: slicerv1alpha1.SliceAllocated, Allocation: &slicerv1alpha1.AllocationReference{Namespace: sa.Namespace, Name: sa.Name}}}
	node := sa.Spec.NodeName
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nodes[node]
	if n == nil {
		n = &nodeReport{pending: map[types.NamespacedName]sliceChange{}}
		r.nodes[node] = n
	}
	n.pending[key] = ch
	r.scheduleLocked(node, n)
}

func (r *sliceReporter) scheduleLocked(node string, n *nodeReport) {
	if n.scheduled {
		return
	}
	n.scheduled = true
	time.AfterFunc(max(time.Until(n.last.Add(r.interval)), 0), func() {
		select {
		case r.due <- node:
		case <-r.stopped:
		}
	})
}

// flush writes the node's pending changes in one status update.
func (r *sliceReporter) flush(ctx context.Context, node string) {
	r.mu.Lock()
	n := r.nodes[node]
	changes := n.pending
	n.pending = map[types.NamespacedName]sliceChange{}
	n.scheduled = false
	n.last = time.Now()
	r.mu.Unlock()
	if ctx.Err() != nil || len(changes) == 0 {
		return
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var na slicerv1alpha1.NodeAccelerator
		if err := r.reader.Get(ctx, types.NamespacedName{Name: node}, &na); err != nil {
			return err
		}
		applyChanges(&na, changes)
		return r.client.Status().Update(ctx, &na)
	})
	if err = client.IgnoreNotFound(err); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "fake agent: NodeAccelerator report failed; retrying", "node", node)
		r.mu.Lock()
		for k, v := range changes {
			if _, newer := n.pending[k]; !newer {
				n.pending[k] = v
			}
		}
		r.scheduleLocked(node, n)
		r.mu.Unlock()
	}
}

// applyChanges puts each present slice on its GPU and removes each absent one.
func applyChanges(na *slicerv1alpha1.NodeAccelerator, changes map[types.NamespacedName]sliceChange) {
	for gi := range na.Status.GPUs {
		g := &na.Status.GPUs[gi]
		kept := g.Slices[:0]
		for _, s := range g.Slices {
			if s.Allocation != nil {
				if _, changed := changes[types.NamespacedName{Namespace: s.Allocation.Namespace, Name: s.Allocation.Name}]; changed {
					continue
				}
			}
			kept = append(kept, s)
		}
		g.Slices = kept
		for _, ch := range changes {
			if ch.present && ch.gpu == g.UUID {
				g.Slices = append(g.Slices, ch.slice)
			}
		}
	}
}

// wait returns once run has returned and no flush is running.
func (r *sliceReporter) wait() {
	<-r.stopped
	r.wg.Wait()
}
