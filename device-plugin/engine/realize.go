package engine

import (
	"fmt"
	"time"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// The realizer: the only code that creates and destroys MIG instances, for both frontends.
// Callers serialize mutations of one GPU themselves (the device-plugin frontend runs one
// goroutine per GPU, the DRA frontend holds its driver's lock); each observation is used for
// one pass, then read again.

// CreateSlice creates a GPU instance at exactly slot and its full compute instance. A profile
// the node's driver is too old for is refused with ERROR_NOT_SUPPORTED before NVML is asked.
func (o *Observation) CreateSlice(slot mig.Slot, m *Metrics) (Slice, error) {
	g := o.GPUByUUID(slot.GPU)
	if g == nil {
		return Slice{}, fmt.Errorf("no GPU %s", slot.GPU)
	}
	if p, err := g.Model.Profile(slot.Profile); err == nil && !p.SupportedBy(o.DriverVersion) {
		return Slice{}, nvml.NewError("CreateGpuInstanceWithPlacement", nvml.ErrorNotSupported,
			fmt.Sprintf("driver %s has no MIG profile %s on %s: it needs R%d or later", o.DriverVersion, p.Name, g.Model, p.MinDriver))
	}
	return gpuWorker{g: g, m: m}.create(slot)
}

// FinishSlice creates the compute instance of an observed GPU instance that has none.
func (o *Observation) FinishSlice(s Slice, m *Metrics) (Slice, error) {
	g := o.GPUByUUID(s.GPU)
	if g == nil {
		return s, fmt.Errorf("no GPU %s", s.GPU)
	}
	return gpuWorker{g: g, m: m}.finishObserved(s)
}

// DestroySlice destroys an observed slice (compute instance, then GPU instance); one already
// gone counts as destroyed.
func (o *Observation) DestroySlice(s Slice, m *Metrics) error {
	g := o.GPUByUUID(s.GPU)
	if g == nil {
		return nil
	}
	return gpuWorker{g: g, m: m}.destroy(s)
}

// gpuWorker serializes MIG mutations of one GPU.
type gpuWorker struct {
	g *GPU
	m *Metrics
}

func (w gpuWorker) timed(op string, f func() error) error {
	start := time.Now()
	err := f()
	w.m.migOp(op, time.Since(start), err)
	return err
}

// create makes a GPU instance at exactly slot, then its full compute instance
// with the compute-instance profile NVML reports as supported.
func (w gpuWorker) create(slot mig.Slot) (Slice, error) {
	p, err := w.g.Model.Profile(slot.Profile)
	if err != nil {
		return Slice{}, err
	}
	info, err := w.g.dev.GPUInstanceProfileInfo(p.NVMLProfile)
	if err != nil {
		w.m.NVMLError(err)
		return Slice{}, fmt.Errorf("GPU instance profile %s: %w", p.Name, err)
	}
	var gi nvml.GPUInstance
	err = w.timed(opCreateGI, func() error {
		var e error
		gi, e = w.g.dev.CreateGPUInstanceWithPlacement(info, nvml.Placement{Start: slot.Placement.Start, Size: slot.Placement.Size})
		return e
	})
	if err != nil {
		return Slice{}, fmt.Errorf("create GPU instance %s: %w", slot, err)
	}
	gii, err := gi.Info()
	if err != nil {
		w.m.NVMLError(err)
		return Slice{}, fmt.Errorf("GPU instance info %s: %w", slot, err)
	}
	return w.finish(Slice{Slot: slot, GI: gii.ID, CI: -1}, gi, p)
}

func (w gpuWorker) finish(s Slice, gi nvml.GPUInstance, p mig.Profile) (Slice, error) {
	cinfo, err := gi.ComputeInstanceProfileInfo(p.ComputeInstanceProfile)
	if err != nil {
		w.m.NVMLError(err)
		return s, fmt.Errorf("compute instance profile for %s: %w", s.Slot, err)
	}
	var ci nvml.ComputeInstance
	err = w.timed(opCreateCI, func() error {
		var e error
		ci, e = gi.CreateComputeInstance(cinfo)
		return e
	})
	if err != nil {
		return s, fmt.Errorf("create compute instance %s: %w", s.Slot, err)
	}
	cii, err := ci.Info()
	if err != nil {
		w.m.NVMLError(err)
		return s, fmt.Errorf("compute instance info %s: %w", s.Slot, err)
	}
	s.CI = cii.ID
	devs, err := w.g.dev.MIGDevices()
	if err != nil {
		w.m.NVMLError(err)
		return s, fmt.Errorf("MIG devices: %w", err)
	}
	for _, d := range devs {
		if d.GPUInstanceID == s.GI && d.ComputeInstanceID == s.CI {
			s.MIGUUID = d.UUID
		}
	}
	if s.MIGUUID == "" {
		return s, fmt.Errorf("no MIG device for %s (GI %d, CI %d)", s.Slot, s.GI, s.CI)
	}
	return s, nil
}

// finishObserved creates the compute instance of an observed bare GPU instance.
func (w gpuWorker) finishObserved(s Slice) (Slice, error) {
	gi, ok := w.g.gis[s.GI]
	if !ok {
		return s, fmt.Errorf("GPU instance %d on %s is gone", s.GI, s.GPU)
	}
	p, err := w.g.Model.Profile(s.Profile)
	if err != nil {
		return s, err
	}
	return w.finish(s, gi.Handle, p)
}

// destroy removes the compute instance, then the GPU instance. A missing
// instance counts as destroyed.
func (w gpuWorker) destroy(s Slice) error {
	gi, ok := w.g.gis[s.GI]
	if !ok {
		return nil
	}
	for _, ci := range gi.CIs {
		err := w.timed(opDestroyCI, ci.Handle.Destroy)
		if err != nil && !nvml.IsNotFound(err) {
			return fmt.Errorf("destroy compute instance %d of %s: %w", ci.ID, s.Slot, err)
		}
	}
	err := w.timed(opDestroyGI, gi.Handle.Destroy)
	if err != nil && !nvml.IsNotFound(err) {
		return fmt.Errorf("destroy GPU instance %d of %s: %w", s.GI, s.Slot, err)
	}
	return nil
}
