package mig

import (
	"fmt"
	"strings"
)

// MemoryTolerancePercent is how far, in percent of a model's nominal memory, the memory NVML
// reports may be from it for a GPU to be taken for that model. NVIDIA sells parts that share a
// PCI device id or a product name but not their memory (an RTX PRO 5000 with 48 or 72 GB, a
// B200 with 180 or 168 GB): their MIG profiles differ, so such a GPU is not that model.
const MemoryTolerancePercent = 5

// RecognitionReason says why a GPU is not taken for any model.
type RecognitionReason string

const (
	// UnknownGPU: neither the PCI device id nor the product name is one of a model's.
	UnknownGPU RecognitionReason = "UnknownGPU"
	// MemoryMismatch: the PCI device id or the name is a model's, the memory is not.
	MemoryMismatch RecognitionReason = "MemoryMismatch"
)

// RecognitionError is a GPU that is not a model of the tables, and why.
type RecognitionError struct {
	// PCIDeviceID is the 16-bit PCI device id (vendor 0x10DE), 0 when unknown.
	PCIDeviceID uint16
	ProductName string
	MemoryMiB   uint64
	Reason      RecognitionReason
	// Model is the model the id or the name points to, for MemoryMismatch.
	Model Model
}

func (e *RecognitionError) Error() string {
	gpu := fmt.Sprintf("GPU %q (PCI device %#04x, %d MiB)", e.ProductName, e.PCIDeviceID, e.MemoryMiB)
	if e.Reason == MemoryMismatch {
		return fmt.Sprintf("%s is not a %s: its memory is more than %d%% off the %s's %d MiB", gpu, e.Model,
			MemoryTolerancePercent, e.Model, e.Model.MemoryMiB())
	}
	return gpu + " is not a MIG model Slicer knows"
}

// memoryFits reports whether memoryMiB (0: unknown) is within MemoryTolerancePercent of m's.
func (m Model) memoryFits(memoryMiB uint64) bool {
	nominal := m.MemoryMiB()
	if memoryMiB == 0 {
		return true
	}
	diff := nominal - memoryMiB
	if memoryMiB > nominal {
		diff = memoryMiB - nominal
	}
	return diff*100 <= nominal*MemoryTolerancePercent
}

// ModelForDevice identifies a model from what NVML reports: the PCI device id (the 16-bit
// device id, or NVML's pciDeviceId, device<<16 | 0x10DE), the product name (nvmlDeviceGetName)
// and the total memory in MiB; each may be zero or empty when unknown.
//
// The PCI device id decides first: when a model lists it, the GPU is that model or, if its
// memory is more than MemoryTolerancePercent off, none. Only a GPU whose id no model lists (or
// that has none) is recognised by its exact product name, with the same memory check. Names
// are never matched by prefix. The error is a *RecognitionError.
func ModelForDevice(pciDeviceID uint32, productName string, memoryMiB uint64) (Model, error) {
	if pciDeviceID > 0xFFFF && pciDeviceID&0xFFFF == 0x10DE {
		pciDeviceID >>= 16
	}
	id := uint16(0)
	if pciDeviceID <= 0xFFFF {
		id = uint16(pciDeviceID)
	}
	name := strings.TrimSpace(productName)
	fail := &RecognitionError{PCIDeviceID: id, ProductName: productName, MemoryMiB: memoryMiB, Reason: UnknownGPU}
	if id != 0 {
		for m := Model(1); m <= numModels; m++ {
			for _, mid := range modelTables[m].pciDeviceIDs {
				if mid != id {
					continue
				}
				if !m.memoryFits(memoryMiB) {
					fail.Reason, fail.Model = MemoryMismatch, m
					return 0, fail
				}
				return m, nil
			}
		}
	}
	if name == "" {
		return 0, fail
	}
	for m := Model(1); m <= numModels; m++ {
		for _, n := range modelTables[m].productNames {
			if !strings.EqualFold(n, name) {
				continue
			}
			if !m.memoryFits(memoryMiB) {
				fail.Reason, fail.Model = MemoryMismatch, m
				return 0, fail
			}
			return m, nil
		}
	}
	return 0, fail
}
