package migdra

import (
	resourceapi "k8s.io/api/resource/v1"
)

// AllocatedDevices is the part of a claim's allocation that DriverName serves: its results
// in pool (a node's name), or in any pool when pool is "". Nil when the claim is not
// allocated. Every reader of claims (the kubelet plugin, the slice map) asks this.
func AllocatedDevices(c *resourceapi.ResourceClaim, pool string) []resourceapi.DeviceRequestAllocationResult {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []resourceapi.DeviceRequestAllocationResult
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == DriverName && (pool == "" || r.Pool == pool) {
			out = append(out, r)
		}
	}
	return out
}
