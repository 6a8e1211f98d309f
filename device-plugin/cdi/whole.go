package cdi

import (
	"fmt"
	"strconv"

	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// A whole GPU (MIG mode off) handed to a container by the device plugin's nvidia.com/gpu
// resource has a spec of its own under the same kind, named by its GPU UUID (the device ID
// the kubelet checkpoints; it does not change across reboots). Its edits set EnvGPUUUID and
// EnvVisibleDevices to the GPU's UUID, as NVIDIA's device plugin names a whole GPU to the
// container toolkit; real mode adds what NVIDIA's own CDI spec gives a whole GPU:
// /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools and the GPU's /dev/nvidia<minor>.
// A container that receives several gets the set device (set.go) listing their UUIDs.

// WholeGPU is what a whole GPU's spec describes.
type WholeGPU struct {
	UUID string
	// Minor is the GPU's /dev/nvidia<minor> (real mode).
	Minor int
}

// WholeSpec renders the CDI spec of a whole GPU (pure).
func (w *Writer) WholeSpec(g WholeGPU) (*cdispec.Spec, error) {
	if err := parser.ValidateDeviceName(g.UUID); err != nil {
		return nil, fmt.Errorf("CDI device name %q: %w", g.UUID, err)
	}
	edits := cdispec.ContainerEdits{Env: []string{EnvGPUUUID + "=" + g.UUID, EnvVisibleDevices + "=" + g.UUID}}
	if w.Real {
		edits.DeviceNodes = []*cdispec.DeviceNode{
			{Path: "/dev/nvidiactl"},
			{Path: "/dev/nvidia-uvm"},
			{Path: "/dev/nvidia-uvm-tools"},
			{Path: "/dev/nvidia" + strconv.Itoa(g.Minor)},
		}
	}
	spec := &cdispec.Spec{Kind: Kind, Devices: []cdispec.Device{{Name: g.UUID, ContainerEdits: edits}}}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec version: %w", err)
	}
	spec.Version = v
	return spec, nil
}

// WriteWhole writes the spec of a whole GPU atomically and returns its qualified device name.
func (w *Writer) WriteWhole(g WholeGPU) (string, error) {
	spec, err := w.WholeSpec(g)
	if err != nil {
		return "", err
	}
	if err := w.writeSpec(w.Path(g.UUID), spec); err != nil {
		return "", err
	}
	return QualifiedName(g.UUID), nil
}
