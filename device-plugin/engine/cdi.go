package engine

import (
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/internal/mig"
)

// CDISlice describes observed slice s of GPU g for a CDI spec, in either frontend: the
// device-plugin frontend names it (its slot's device ID), the DRA frontend writes it into its
// claim's spec (device-plugin/cdi).
func CDISlice(g *GPU, s Slice) cdi.Slice {
	return cdi.Slice{MIGUUID: s.MIGUUID, GPUUUID: s.GPU, GPUMinor: g.Index, Profile: mig.LegalProfileName(s.Profile),
		PlacementStart: s.Placement.Start, PlacementSize: s.Placement.Size, GPUInstance: s.GI, ComputeInst: s.CI}
}

// WholeCDI describes GPU g handed out whole for a CDI spec, in either frontend.
func WholeCDI(g *GPU) cdi.WholeGPU { return cdi.WholeGPU{UUID: g.UUID, Minor: g.Index} }
