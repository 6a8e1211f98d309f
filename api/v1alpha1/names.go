package v1alpha1

import (
	"strconv"
	"strings"
)

// AllocationName is the deterministic name of a pod's index-th SliceAllocation (index counts
// the pod's slices of every profile, from 0): <pod name, truncated>-<first 8 characters of
// the pod UID>-<index>, at most 253 characters and a DNS-1123 subdomain (pod names already
// are one). The scheduler names the allocations it commits so; the agent finds a pod's
// allocations by name when its cache does not have them yet.
func AllocationName(podName string, uid string, index int32) string {
	short := uid
	if len(short) > 8 {
		short = short[:8]
	}
	suffix := "-" + strings.ToLower(short) + "-" + strconv.Itoa(int(index))
	if max := 253 - len(suffix); len(podName) > max {
		podName = podName[:max]
	}
	podName = strings.TrimRight(podName, "-.")
	return podName + suffix
}
