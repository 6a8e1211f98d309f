package migdra

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestAllocatedDevicesKeepsThisDriverAndPool(t *testing.T) {
	c := &resourceapi.ResourceClaim{}
	if got := AllocatedDevices(c, ""); got != nil {
		t.Fatalf("unallocated claim: %v", got)
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Driver: DriverName, Pool: "node-a", Device: "gpu-0-1g-10gb-at-0"},
		{Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0"},
		{Driver: DriverName, Pool: "node-b", Device: "gpu-1-3g-40gb-at-4"},
	}}}
	if got := AllocatedDevices(c, "node-a"); len(got) != 1 || got[0].Device != "gpu-0-1g-10gb-at-0" {
		t.Fatalf("pool node-a: %v", got)
	}
	if got := AllocatedDevices(c, ""); len(got) != 2 || got[1].Device != "gpu-1-3g-40gb-at-4" {
		t.Fatalf("any pool: %v", got)
	}
}
