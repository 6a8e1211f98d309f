package agent

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/device-plugin/engine"
)

// opResult is the outcome of one slice operation.
type opResult struct {
	Slice engine.Slice
	Err   error
}

// job is one slice operation on a GPU.
type job struct {
	// key is the allocation the job is for; zero for an orphan's destroy.
	key    types.NamespacedName
	kind   int // jobDestroy, jobFinish, jobCreate
	slot   Slot
	slice  engine.Slice
	result opResult
}

func (j *job) forAllocation() bool { return j.key.Name != "" }

const (
	jobDestroy = iota
	jobFinish
	jobCreate
)

// runJobs runs each GPU's jobs in order (destroys first) on one goroutine per
// GPU, GPUs in parallel.
func runJobs(o *engine.Observation, m *engine.Metrics, jobs []*job) {
	byGPU := map[string][]*job{}
	for _, j := range jobs {
		byGPU[j.slot.GPU] = append(byGPU[j.slot.GPU], j)
	}
	var wg sync.WaitGroup
	for _, js := range byGPU {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, kind := range []int{jobDestroy, jobFinish, jobCreate} {
				for _, j := range js {
					if j.kind != kind {
						continue
					}
					switch kind {
					case jobDestroy:
						j.result = opResult{Slice: j.slice, Err: o.DestroySlice(j.slice, m)}
					case jobFinish:
						s, err := o.FinishSlice(j.slice, m)
						j.result = opResult{Slice: s, Err: err}
					case jobCreate:
						s, err := o.CreateSlice(j.slot, m)
						j.result = opResult{Slice: s, Err: err}
					}
				}
			}
		}()
	}
	wg.Wait()
}
