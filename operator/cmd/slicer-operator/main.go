// Command slicer-operator installs and runs Slicer from the cluster-scoped
// Slicer "default": NFD rule, KMM Module, webhook, scheduler, agent and
// monitoring objects. Images come from RELATED_IMAGE_* variables.
// `slicer-operator uninstall-release` is the Helm chart's pre-delete hook
// (operator/releasehook).
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/slicer-operator/slicer/dashboards"
	"github.com/slicer-operator/slicer/internal/kubeversion"
	"github.com/slicer-operator/slicer/internal/serving"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/manager"
	"github.com/slicer-operator/slicer/operator/metrics"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/prometheusrules"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Default images, overridden by RELATED_IMAGE_* (set by the bundle).
const (
	defaultRegistry = "quay.io/slicer-operator/"
	defaultTag      = "v0.2.0"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// schedulerImages has one scheduler build per supported Kubernetes minor:
// RELATED_IMAGE_SCHEDULER_K8S_1_<minor>, by default
// slicer-scheduler:<tag>-k8s-1.<minor>.
func schedulerImages() map[kubeversion.Minor]string {
	out := make(map[kubeversion.Minor]string, len(kubeversion.Supported))
	for _, m := range kubeversion.Supported {
		out[m] = env(render.SchedulerImageEnv(m), defaultRegistry+"slicer-scheduler:"+defaultTag+"-k8s-"+m.String())
	}
	return out
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == uninstallReleaseCmd {
		os.Exit(uninstallRelease(os.Args[2:]))
	}
	var (
		namespace, agentNamespace, hostAddr string
		leaderElect                         bool
		lease                               manager.Config
		listen                              serving.Flags
	)
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the operator, scheduler and webhook (default $POD_NAMESPACE).")
	flag.StringVar(&agentNamespace, "agent-namespace", "", "Namespace of the agent, labelled for the privileged Pod Security level (default <namespace>-agent).")
	listen.Bind(flag.CommandLine, ":8443", ":8081")
	flag.StringVar(&hostAddr, "host-network-address", "127.0.0.1", "Address a host-network webhook serves on and the apiserver dials (spec.network.endpointMode HostNetwork).")
	flag.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so only one replica reconciles.")
	flag.DurationVar(&lease.LeaseDuration, "leader-elect-lease-duration", manager.DefaultLeaseDuration,
		"How long a standby waits after the leader's last renewal before it takes the Lease (a killed leader is replaced within about this long).")
	flag.DurationVar(&lease.RenewDeadline, "leader-elect-renew-deadline", manager.DefaultRenewDeadline,
		"How long the leader keeps retrying to renew before it gives up leading (and exits); shorter than the lease duration.")
	flag.DurationVar(&lease.RetryPeriod, "leader-elect-retry-period", manager.DefaultRetryPeriod,
		"How often replicas try to acquire or renew the Lease.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	if namespace == "" {
		log.Error(fmt.Errorf("no namespace"), "set --namespace or POD_NAMESPACE")
		os.Exit(2)
	}
	if agentNamespace == "" {
		agentNamespace = namespace + "-agent"
	}
	lease.LeaderElection = leaderElect
	if err := run(namespace, agentNamespace, hostAddr, lease, listen); err != nil {
		log.Error(err, "operator failed")
		os.Exit(1)
	}
}

// run runs the manager; lease carries the leader-election settings.
func run(namespace, agentNamespace, hostAddr string, lease manager.Config, listen serving.Flags) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	metricsOpts, err := listen.MetricsOptions()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options(manager.Config{
		Namespace:        namespace,
		AgentNamespace:   agentNamespace,
		LeaderElection:   lease.LeaderElection,
		LeaseDuration:    lease.LeaseDuration,
		RenewDeadline:    lease.RenewDeadline,
		RetryPeriod:      lease.RetryPeriod,
		Metrics:          metricsOpts,
		HealthProbeAddr:  listen.ProbeAddr,
		LeaderElectionID: manager.LeaderElectionID,
	}))
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	m, err := metrics.New(ctrlmetrics.Registry)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	dash, err := dashboards.Files()
	if err != nil {
		return fmt.Errorf("dashboards: %w", err)
	}
	r := &controller.SlicerReconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Discovery:      dc,
		Recorder:       mgr.GetEventRecorder(slicerv1alpha1.OperatorName),
		Metrics:        m,
		Namespace:      namespace,
		AgentNamespace: agentNamespace,
		Images: render.Images{
			Schedulers: schedulerImages(),
			Webhook:    env("RELATED_IMAGE_WEBHOOK", defaultRegistry+"slicer-webhook:"+defaultTag),
			Agent:      env("RELATED_IMAGE_AGENT", defaultRegistry+"slicer-agent:"+defaultTag),
			Driver:     env("RELATED_IMAGE_DRIVER", defaultRegistry+"nvidia-driver"),
		},
		Ports:              render.DefaultPorts(),
		HostNetworkAddress: hostAddr,
		// Host-network components dial the apiserver the way the operator
		// itself does (overridden by the local overlay, the Service elsewhere).
		APIServer: render.APIServerEndpoint{
			Host: os.Getenv("KUBERNETES_SERVICE_HOST"), Port: os.Getenv("KUBERNETES_SERVICE_PORT"),
		},
		Admission:         render.Admission,
		PrometheusRule:    prometheusrules.PrometheusRule,
		Dashboards:        dash,
		DeletionTimeout:   controller.DefaultDeletionTimeout,
		DependencyRecheck: controller.DefaultDependencyRecheck,
		VersionRecheck:    controller.DefaultVersionRecheck,
		CertValidity:      controller.DefaultCertValidity,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
