package v1alpha1

import (
	"strconv"
	"strings"
)

// Names Slicer's components agree on. Every component may import this package, so each name is
// defined here once and the components refer to it.
const (
	// SchedulerName is the scheduler's profile name (the spec.schedulerName of MIG pods), the
	// name of its Deployment and ServiceAccount, and of its leader-election Lease.
	SchedulerName = "slicer-scheduler"
	// SchedulerPluginName is the name the MIG plugin is registered under in the scheduler.
	SchedulerPluginName = "SlicerMIG"
	// WebhookName names the webhook's Deployment, Service and ServiceAccount.
	WebhookName = "slicer-webhook"
	// WebhookPath is the path of the webhook's translating handler.
	WebhookPath = "/mutate-pod"
	// WebhookNoTranslateSuffix turns WebhookPath (or the URL) into the path of the handler that
	// leaves nvidia.com/mig-* alone.
	WebhookNoTranslateSuffix = "-no-translate"
	// AgentName names the agent's DaemonSet and ServiceAccount, and its controller and event source.
	AgentName = "slicer-agent"
	// OperatorName names the operator's Deployment, ServiceAccount and event source.
	OperatorName = "slicer-operator"
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
