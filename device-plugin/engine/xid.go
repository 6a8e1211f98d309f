package engine

import (
	"fmt"
	"strconv"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// XIDScope is what an XID makes unhealthy.
type XIDScope string

// XID scopes, also the values of the xid metric's scope label.
const (
	// XIDApplication: a fault of the application running on the GPU; the GPU stays healthy.
	XIDApplication XIDScope = "application"
	// XIDInstance: an error the driver confined to one MIG instance (the event names its GPU
	// and compute instance): that instance is unhealthy, the rest of the GPU is not.
	XIDInstance XIDScope = "instance"
	// XIDGPU: the GPU is broken: every device on it is unhealthy.
	XIDGPU XIDScope = "gpu"
)

// applicationXIDs are the XIDs that report an application's fault, not the GPU's: graphics
// engine exception (13), GPU memory page fault (31), GPU stopped processing (43), preemptive
// cleanup after previous errors (45), video processor exception (68), context switch timeout
// (109). This follows the classification of NVIDIA/k8s-device-plugin internal/rm/health.go
// (its list of XIDs that leave a device healthy), as its attribution of an XID to a MIG device
// by the event's GPU and compute instance ids does below.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// ClassifyXID says what an XID event makes unhealthy: nothing for an application's fault;
// the MIG instance the event names (both its GPU and compute instance ids set); else the
// whole GPU.
func ClassifyXID(ev nvml.Event) XIDScope {
	switch {
	case applicationXIDs[ev.Data]:
		return XIDApplication
	case ev.GPUInstanceID != nvml.NoInstance && ev.ComputeInstanceID != nvml.NoInstance:
		return XIDInstance
	}
	return XIDGPU
}

// maxXIDLabel bounds the xid metric label: NVIDIA's XIDs are below it; any other is "other".
const maxXIDLabel = 255

func xidLabel(code uint64) string {
	if code == 0 || code > maxXIDLabel {
		return "other"
	}
	return strconv.FormatUint(code, 10)
}

// xidReason is how an XID reads in a health message.
func xidReason(code uint64, where string) string {
	return fmt.Sprintf("XID %d %s (NVML event)", code, where)
}
