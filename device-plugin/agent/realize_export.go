package agent

import (
	"fmt"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// This file exposes the NVML realizer (gpus.go) to the other frontends (device-plugin/dra):
// the same observation, the same create and destroy sequences, the same metrics. Callers
// serialize mutations of one GPU themselves, as runJobs does.

// ObserveGPUs reads every GPU and its MIG instances (an initialised lib).
func ObserveGPUs(lib nvml.Library, m *Metrics) (*Observation, error) { return observe(lib, m) }

// GPUByUUID is the observed GPU with that UUID, nil if none.
func (o *Observation) GPUByUUID(uuid string) *GPU { return o.gpu(uuid) }

// CreateSlice creates a GPU instance at exactly slot and its full compute instance.
func (o *Observation) CreateSlice(slot Slot, m *Metrics) (Slice, error) {
	g := o.gpu(slot.GPU)
	if g == nil {
		return Slice{}, fmt.Errorf("no GPU %s", slot.GPU)
	}
	return gpuWorker{g: g, m: m}.create(slot)
}

// FinishSlice creates the compute instance of an observed GPU instance that has none.
func (o *Observation) FinishSlice(s Slice, m *Metrics) (Slice, error) {
	g := o.gpu(s.GPU)
	if g == nil {
		return s, fmt.Errorf("no GPU %s", s.GPU)
	}
	return gpuWorker{g: g, m: m}.finishObserved(s)
}

// DestroySlice destroys an observed slice (compute instance, then GPU instance); one already
// gone counts as destroyed.
func (o *Observation) DestroySlice(s Slice, m *Metrics) error {
	g := o.gpu(s.GPU)
	if g == nil {
		return nil
	}
	return gpuWorker{g: g, m: m}.destroy(s)
}
