package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// lateKubelet lists its devices only from its n-th answer on, as a kubelet whose
// ListAndWatch update is still on its way.
type lateKubelet struct {
	devices map[string]bool
	from    int
	calls   int
	err     error
}

func (k *lateKubelet) AllocatableDeviceIDs(context.Context) (map[string]bool, error) {
	k.calls++
	if k.err != nil {
		return nil, k.err
	}
	if k.calls < k.from {
		return map[string]bool{}, nil
	}
	return k.devices, nil
}

// An allocation turns Ready only once the kubelet lists its device: the kubelet admits a
// bound pod at once and rejects it for good when the device is not there yet.
func TestAwaitKubelet(t *testing.T) {
	fresh := types.NamespacedName{Namespace: "team-a", Name: "train-0"}
	already := types.NamespacedName{Namespace: "team-a", Name: "serve-0"}
	alloc := func(state slicerv1alpha1.AllocationState) *slicerv1alpha1.SliceAllocation {
		return &slicerv1alpha1.SliceAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a"}, Status: slicerv1alpha1.SliceAllocationStatus{State: state}}
	}
	ids := map[types.NamespacedName]string{fresh: "GPU-1_1g.10gb_0", already: "GPU-1_1g.10gb_1"}
	for _, tc := range []struct {
		name      string
		kubelet   *lateKubelet
		wantRetry bool
		// wantState of fresh after the wait: Ready (left as marked) or Creating.
		wantState slicerv1alpha1.AllocationState
	}{
		{name: "listed at once", kubelet: &lateKubelet{devices: map[string]bool{"GPU-1_1g.10gb_0": true}, from: 1},
			wantState: slicerv1alpha1.AllocationReady},
		{name: "listed a few polls later", kubelet: &lateKubelet{devices: map[string]bool{"GPU-1_1g.10gb_0": true}, from: 4},
			wantState: slicerv1alpha1.AllocationReady},
		{name: "never listed: Creating, retried", kubelet: &lateKubelet{devices: map[string]bool{}, from: 1},
			wantRetry: true, wantState: slicerv1alpha1.AllocationCreating},
		{name: "the kubelet cannot say: not held back", kubelet: &lateKubelet{err: errors.New("unavailable")},
			wantState: slicerv1alpha1.AllocationReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{opts: Options{Kubelet: tc.kubelet, KubeletWait: 200 * time.Millisecond}}
			w := world{Allocs: map[types.NamespacedName]*slicerv1alpha1.SliceAllocation{
				fresh: alloc(slicerv1alpha1.AllocationCreating), already: alloc(slicerv1alpha1.AllocationReady)}}
			o := outcome{Statuses: map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus{
				fresh:   {State: slicerv1alpha1.AllocationReady},
				already: {State: slicerv1alpha1.AllocationReady},
			}}
			retry := r.awaitKubelet(context.Background(), w, o, ids)
			if retry != tc.wantRetry {
				t.Errorf("retry = %v, want %v", retry, tc.wantRetry)
			}
			if got := o.Statuses[fresh]; got.State != tc.wantState {
				t.Errorf("fresh allocation = %+v, want state %s", got, tc.wantState)
			} else if got.State == slicerv1alpha1.AllocationCreating && got.Reason != ReasonKubeletNotAdvertised {
				t.Errorf("reason = %q, want %s", got.Reason, ReasonKubeletNotAdvertised)
			}
			if got := o.Statuses[already]; got.State != slicerv1alpha1.AllocationReady {
				t.Errorf("an allocation already Ready is not held back: %+v", got)
			}
		})
	}
}
