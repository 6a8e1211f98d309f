package v1alpha1

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
