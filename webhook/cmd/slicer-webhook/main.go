// Command slicer-webhook serves Slicer's mutating admission webhook for pods.
// The webhook configuration and the ValidatingAdmissionPolicy that back it up
// are rendered by webhook/config and applied by the operator.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/slicer-operator/slicer/internal/serving"
	"github.com/slicer-operator/slicer/webhook"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "slicer-webhook:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		so        webhook.ServerOptions
		translate string
		listen    serving.Flags
	)
	flag.StringVar(&so.CertDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory of the serving certificate and key (reloaded on change).")
	flag.StringVar(&so.CertName, "cert-name", "tls.crt", "Serving certificate file name in --cert-dir.")
	flag.StringVar(&so.KeyName, "key-name", "tls.key", "Serving key file name in --cert-dir.")
	flag.IntVar(&so.Port, "port", 9443, "Port the webhook serves on.")
	flag.StringVar(&so.Host, "bind-address", "", "Address the webhook serves on (empty: every interface; the operator sets the node address the apiserver dials in HostNetwork mode).")
	flag.StringVar(&so.Settings.SchedulerName, "scheduler-name", webhook.DefaultSchedulerName, "Name of the Slicer scheduler, set as spec.schedulerName of MIG pods.")
	flag.StringVar(&translate, "translate-nvidia-resources", "enabled", "enabled: rewrite nvidia.com/mig-* to slicer.dev/mig-* on "+webhook.PathMutatePod+"; disabled: leave nvidia.com/mig-* to NVIDIA's device plugin everywhere.")
	listen.Bind(flag.CommandLine, "127.0.0.1:8080", "127.0.0.1:8081")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	switch translate {
	case "enabled":
		so.Settings.TranslateNVIDIA = true
	case "disabled":
		so.Settings.TranslateNVIDIA = false
	default:
		return fmt.Errorf("--translate-nvidia-resources=%q: want enabled or disabled", translate)
	}
	if so.Settings.SchedulerName == "" {
		return errors.New("--scheduler-name must not be empty")
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName(slicerv1alpha1.WebhookName)

	m, err := webhook.NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	srv, watcher, err := webhook.NewServer(so, m, log)
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	metrics, err := listen.MetricsOptions()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metrics,
		HealthProbeBindAddress: listen.ProbeAddr,
		WebhookServer:          srv,
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if err := mgr.Add(watcher); err != nil {
		return fmt.Errorf("add certificate watcher: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	// GetWebhookServer also adds the server to the manager's runnables.
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	log.Info("starting", "host", so.Host, "port", so.Port, "metrics", listen.MetricsAddr, "secureMetrics", listen.SecureMetrics, "health", listen.ProbeAddr, "certDir", so.CertDir, "schedulerName", so.Settings.SchedulerName, "translateNVIDIA", so.Settings.TranslateNVIDIA)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}
