package plugin

import (
	"fmt"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

const stateKey fwk.StateKey = Name

// podState is what PreFilter learns about a pod; immutable once written.
type podState struct {
	// slices are the pod's slices, NVIDIA spelling, largest first: slice i
	// becomes the allocation with index i.
	slices []string
	// whole is how many whole GPUs the pod asks for (whole.go), 0 for a pod of slices; its
	// whole GPU i becomes the allocation with index i, and missing lists those still to place.
	whole int
	// req holds the slices still to place (nil when the pod's existing
	// allocations already cover them all); missing[k] is the index of req's k-th slice.
	req     *mig.Request
	missing []int32
	// adopted are the pod's existing allocations (after a scheduler restart
	// between PreBind and Bind), all on adoptedNode; missing lists the rest.
	adopted     []snapshot.Slot
	adoptedNode string
	// noRoom is Filter's reason, computed once per cycle.
	noRoom string
	// freedGen is the cache's FreedGeneration before this cycle read the
	// snapshot (see Plugin.reject).
	freedGen uint64
}

// Clone implements fwk.StateData; the state is immutable.
func (s *podState) Clone() fwk.StateData { return s }

func readState(cs fwk.CycleState) (*podState, error) {
	d, err := cs.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("read %s cycle state: %w", Name, err)
	}
	s, ok := d.(*podState)
	if !ok {
		return nil, fmt.Errorf("%s cycle state has type %T", Name, d)
	}
	return s, nil
}
