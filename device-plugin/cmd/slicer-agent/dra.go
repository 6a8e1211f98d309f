package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/dra"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

const (
	frontendDevicePlugin = "device-plugin"
	frontendDRA          = "dra"
)

var (
	draDefaultPluginDir   = filepath.Join(kubeletplugin.KubeletPluginsDir, migdra.DriverName)
	draDefaultRegistryDir = kubeletplugin.KubeletRegistryDir
)

// runDRA serves the kubelet DRA plugin (device-plugin/dra) instead of the SliceAllocation
// reconciler and the device plugin; the manager only serves metrics and health.
func runDRA(ctx context.Context, f flags, lib nvml.Library, gpuModes []slicerv1alpha1.GPUModePolicy, metrics *engine.Metrics, log logr.Logger) error {
	// The helper listens in the plugin directory but does not create it.
	if err := os.MkdirAll(f.draPluginDir, 0o750); err != nil {
		return fmt.Errorf("DRA plugin directory: %w", err)
	}
	cfg := ctrl.GetConfigOrDie()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	mgr, err := newManager(cfg, f, ctrl.Options{Scheme: scheme()}, log)
	if err != nil {
		return err
	}
	// The NodeAccelerator status is read and written through the API server, with no cache:
	// one GET per sync, and no watch to keep (the plugin syncs on its own schedule, so a
	// cached copy that lags its last write would hold the next write until a resync).
	status, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("status client: %w", err)
	}
	drv := dra.New(dra.Options{NodeName: f.node, Library: lib, Emulated: f.emulate != "", Client: cs, GPUModes: gpuModes,
		Status: status, Events: mgr.GetEventRecorder(slicerv1alpha1.AgentName),
		CDI: &cdi.Writer{Dir: f.cdiDir, Real: f.emulate == ""}, Metrics: metrics, OrphanGrace: f.grace, Resync: f.resync, Log: log.WithName("dra")})
	run := func(ctx context.Context) error {
		return drv.Run(ctx, kubeletplugin.PluginDataDirectoryPath(f.draPluginDir), kubeletplugin.RegistrarDirectoryPath(f.draRegistryDir))
	}
	if err := mgr.Add(manager.RunnableFunc(run)); err != nil {
		return fmt.Errorf("add DRA plugin: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	log.Info("starting DRA frontend", "node", f.node, "driver", migdra.DriverName, "cdiDir", f.cdiDir, "pluginDir", f.draPluginDir,
		"registryDir", f.draRegistryDir, "metrics", f.listen.MetricsAddr, "health", f.listen.ProbeAddr)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}
