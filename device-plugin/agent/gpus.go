package agent

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// GPU is one observed physical GPU.
type GPU struct {
	Index       int
	UUID        string
	ProductName string
	MemoryMiB   uint64
	// Model is zero when the GPU is not a MIG model Slicer knows.
	Model   mig.Model
	MIGMode nvml.MIGMode
	// MIGSupported is false when NVML reports MIG as not supported.
	MIGSupported bool
	Healthy      bool
	Slices       []Slice
	// Err is set when the GPU could not be fully observed.
	Err error

	dev nvml.Device
	gis map[int]nvml.ObservedGI
}

// Observation is the node's NVML state.
type Observation struct {
	DriverVersion string
	GPUs          []*GPU
}

func (o *Observation) gpu(uuid string) *GPU {
	for _, g := range o.GPUs {
		if g.UUID == uuid {
			return g
		}
	}
	return nil
}

func (o *Observation) slices() []Slice {
	var out []Slice
	for _, g := range o.GPUs {
		out = append(out, g.Slices...)
	}
	return out
}

// profiles returns the GPU- and compute-instance profile enums of a model.
func profiles(m mig.Model) (gi, ci []int) {
	seen := map[int]bool{}
	for _, p := range m.Profiles() {
		gi = append(gi, p.NVMLProfile)
		if !seen[p.ComputeInstanceProfile] {
			seen[p.ComputeInstanceProfile] = true
			ci = append(ci, p.ComputeInstanceProfile)
		}
	}
	return gi, ci
}

func profileByEnum(m mig.Model, enum int) (mig.Profile, bool) {
	for _, p := range m.Profiles() {
		if p.NVMLProfile == enum {
			return p, true
		}
	}
	return mig.Profile{}, false
}

// observe reads every GPU: identity, MIG mode, then GPU instances first and
// compute instances second (nvml.ListInstances).
func observe(lib nvml.Library, m *Metrics) (*Observation, error) {
	ver, err := lib.DriverVersion()
	if err != nil {
		m.nvmlError(err)
		return nil, fmt.Errorf("driver version: %w", err)
	}
	n, err := lib.DeviceCount()
	if err != nil {
		m.nvmlError(err)
		return nil, fmt.Errorf("device count: %w", err)
	}
	o := &Observation{DriverVersion: ver}
	for i := 0; i < n; i++ {
		g, err := observeGPU(lib, i)
		if err != nil {
			m.nvmlError(err)
			return nil, err
		}
		if g.Err != nil {
			m.nvmlError(g.Err)
		}
		o.GPUs = append(o.GPUs, g)
	}
	return o, nil
}

func observeGPU(lib nvml.Library, i int) (*GPU, error) {
	dev, err := lib.Device(i)
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", i, err)
	}
	g := &GPU{Index: i, dev: dev, Healthy: true, gis: map[int]nvml.ObservedGI{}}
	if g.UUID, err = dev.UUID(); err != nil {
		return nil, fmt.Errorf("device %d uuid: %w", i, err)
	}
	// Identity details are best effort; a failure marks the GPU unhealthy.
	name, errName := dev.Name()
	mem, errMem := dev.MemoryMiB()
	pci, errPCI := dev.PCIDeviceID()
	g.ProductName, g.MemoryMiB = name, mem
	if errName != nil || errMem != nil || errPCI != nil {
		g.Healthy = false
		g.Err = fmt.Errorf("device %d identity: name %w, memory %w, pci %w", i, errName, errMem, errPCI)
		return g, nil
	}
	if m, err := mig.ModelForDevice(pci, name, mem); err == nil {
		g.Model = m
	}
	cur, _, err := dev.MIGMode()
	switch {
	case nvml.ReturnOf(err) == nvml.ErrorNotSupported:
		return g, nil
	case err != nil:
		g.Healthy, g.Err = false, fmt.Errorf("device %d MIG mode: %w", i, err)
		return g, nil
	}
	g.MIGSupported, g.MIGMode = true, cur
	if cur != nvml.MIGEnabled || !g.Model.Valid() {
		return g, nil
	}
	giP, ciP := profiles(g.Model)
	gis, err := nvml.ListInstances(dev, giP, ciP)
	if err != nil {
		g.Healthy, g.Err = false, fmt.Errorf("device %d instances: %w", i, err)
		return g, nil
	}
	for _, gi := range gis {
		p, ok := profileByEnum(g.Model, gi.Profile)
		if !ok {
			continue
		}
		s := Slice{Slot: Slot{GPU: g.UUID, Profile: p.Name, Placement: mig.Placement{Start: gi.Placement.Start, Size: gi.Placement.Size}}, GI: gi.ID, CI: -1}
		if len(gi.CIs) > 0 {
			s.CI, s.MIGUUID = gi.CIs[0].ID, gi.CIs[0].MIGUUID
		}
		g.Slices = append(g.Slices, s)
		g.gis[gi.ID] = gi
	}
	return g, nil
}

// opResult is the outcome of one slice operation.
type opResult struct {
	Slice Slice
	Err   error
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
func (w gpuWorker) create(slot Slot) (Slice, error) {
	p, err := w.g.Model.Profile(slot.Profile)
	if err != nil {
		return Slice{}, err
	}
	info, err := w.g.dev.GPUInstanceProfileInfo(p.NVMLProfile)
	if err != nil {
		w.m.nvmlError(err)
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
		w.m.nvmlError(err)
		return Slice{}, fmt.Errorf("GPU instance info %s: %w", slot, err)
	}
	return w.finish(Slice{Slot: slot, GI: gii.ID, CI: -1}, gi, p)
}

func (w gpuWorker) finish(s Slice, gi nvml.GPUInstance, p mig.Profile) (Slice, error) {
	cinfo, err := gi.ComputeInstanceProfileInfo(p.ComputeInstanceProfile)
	if err != nil {
		w.m.nvmlError(err)
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
		w.m.nvmlError(err)
		return s, fmt.Errorf("compute instance info %s: %w", s.Slot, err)
	}
	s.CI = cii.ID
	devs, err := w.g.dev.MIGDevices()
	if err != nil {
		w.m.nvmlError(err)
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

// job is one slice operation on a GPU.
type job struct {
	// key is the allocation the job is for; zero for an orphan's destroy.
	key    types.NamespacedName
	kind   int // jobDestroy, jobFinish, jobCreate
	slot   Slot
	slice  Slice
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
func runJobs(o *Observation, m *Metrics, jobs []*job) {
	byGPU := map[string][]*job{}
	for _, j := range jobs {
		byGPU[j.slot.GPU] = append(byGPU[j.slot.GPU], j)
	}
	var wg sync.WaitGroup
	for uuid, js := range byGPU {
		g := o.gpu(uuid)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := gpuWorker{g: g, m: m}
			for _, kind := range []int{jobDestroy, jobFinish, jobCreate} {
				for _, j := range js {
					if j.kind != kind {
						continue
					}
					switch kind {
					case jobDestroy:
						j.result = opResult{Slice: j.slice, Err: w.destroy(j.slice)}
					case jobFinish:
						s, err := w.finishObserved(j.slice)
						j.result = opResult{Slice: s, Err: err}
					case jobCreate:
						s, err := w.create(j.slot)
						j.result = opResult{Slice: s, Err: err}
					}
				}
			}
		}()
	}
	wg.Wait()
}
