// Command slicer-agent is Slicer's node agent (a DaemonSet): it owns MIG on
// its node, realizes the node's SliceAllocations as MIG devices, writes their
// CDI specs, advertises them to the kubelet and publishes the node's
// NodeAccelerator. It starts without a GPU: with no usable NVML it reports
// DriverNotReady (reason NVMLUnavailable) and keeps retrying.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
	"github.com/slicer-operator/slicer/device-plugin/plugin"
	"github.com/slicer-operator/slicer/device-plugin/podresources"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/serving"
)

type flags struct {
	node, emulate, stateFile, cdiDir, pluginDir, podResources, nvmlLib, nvidiaSMI string
	frontend, draPluginDir, draRegistryDir, gpuModes                              string
	grace, resync, emulateLatency                                                 time.Duration
	listen                                                                        serving.Flags
}

func main() {
	var f flags
	flag.StringVar(&f.node, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	flag.StringVar(&f.emulate, "emulate", "", "emulate GPUs instead of using NVML: MODEL:COUNT[,MODEL:COUNT], e.g. H100-80GB:8")
	flag.StringVar(&f.stateFile, "emulate-state-file", "", "file where emulated GPUs keep their MIG state across agent restarts (delete it to emulate a reboot)")
	flag.DurationVar(&f.emulateLatency, "emulate-latency", 0, "latency added to every emulated MIG create/destroy")
	flag.StringVar(&f.cdiDir, "cdi-dir", cdi.DefaultDir, "directory for the CDI specs of realized slices")
	flag.StringVar(&f.pluginDir, "device-plugin-dir", plugin.DefaultDir, "kubelet device plugin directory (holds kubelet.sock)")
	flag.StringVar(&f.podResources, "pod-resources-socket", podresources.DefaultSocket, "kubelet PodResources socket (empty: do not ask the kubelet)")
	flag.DurationVar(&f.grace, "orphan-grace-period", 5*time.Minute, "how long a MIG instance no allocation holds is kept before it is destroyed (if unused)")
	flag.DurationVar(&f.resync, "resync-period", time.Minute, "periodic recovery interval")
	flag.StringVar(&f.frontend, "frontend", frontendDevicePlugin, "how workloads get slices: "+frontendDevicePlugin+" (SliceAllocations, device plugin) or "+frontendDRA+" (kubelet DRA plugin, ResourceClaims)")
	flag.StringVar(&f.draPluginDir, "dra-plugin-dir", draDefaultPluginDir, "--frontend=dra: directory of the DRA plugin's socket")
	flag.StringVar(&f.draRegistryDir, "dra-registry-dir", draDefaultRegistryDir, "--frontend=dra: kubelet plugin registration directory")
	f.listen.Bind(flag.CommandLine, "127.0.0.1:8080", "127.0.0.1:8081")
	flag.StringVar(&f.gpuModes, migapi.GPUModesFlagName, "", "the Slicer's spec.gpuModes as a JSON list (empty: every GPU stays in MIG mode); the operator renders it")
	flag.StringVar(&f.nvmlLib, "nvml-library", "", "path of libnvidia-ml.so.1 (default: the loader's search path)")
	flag.StringVar(&f.nvidiaSMI, "nvidia-smi", "nvidia-smi", "the nvidia-smi that resets an A100 or A30 whose MIG mode change needs it, where the GPU's mode policy allows a reset (NVML has no reset call)")
	zopts := zap.Options{}
	zopts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	if err := run(ctrl.SetupSignalHandler(), f); err != nil {
		ctrl.Log.Error(err, "slicer-agent failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	log := ctrl.Log.WithName(slicerv1alpha1.AgentName)
	if f.node == "" {
		return errors.New("--node-name (or NODE_NAME) is required")
	}
	gpuModes, err := migapi.ParseGPUModesFlag(f.gpuModes)
	if err != nil {
		return fmt.Errorf("--%s: %w", migapi.GPUModesFlagName, err)
	}
	var (
		lib       nvml.Library
		resources []string
	)
	if f.emulate != "" {
		models, err := emulated.ParseSpec(f.emulate)
		if err != nil {
			return err
		}
		b, err := emulated.New(emulated.Options{Node: f.node, GPUs: models, StateFile: f.stateFile, Latency: f.emulateLatency})
		if err != nil {
			return fmt.Errorf("emulated NVML: %w", err)
		}
		lib, resources = b, plugin.ResourcesFor(models)
		log.Info("emulating GPUs", "gpus", f.emulate, "stateFile", f.stateFile)
	} else {
		hw := nvidia.New(f.nvmlLib)
		hw.NvidiaSMI = f.nvidiaSMI
		lib, resources = hw, realResources(hw)
	}
	metrics := engine.NewMetrics(ctrlmetrics.Registry)
	switch f.frontend {
	case frontendDevicePlugin:
		// Whole GPUs, on a GPU of any model with MIG mode off (device-plugin/agent/whole.go),
		// registered from the start with no devices, as the MIG profiles are.
		resources = append(resources, migapi.NVIDIAGPUResource)
	case frontendDRA:
		return runDRA(ctx, f, lib, gpuModes, metrics, log)
	default:
		return fmt.Errorf("--frontend %q: want %s or %s", f.frontend, frontendDevicePlugin, frontendDRA)
	}
	mgr, err := newManager(ctrl.GetConfigOrDie(), f, ctrl.Options{Scheme: scheme(), Cache: agent.CacheOptions(f.node)}, log)
	if err != nil {
		return err
	}
	trigger := make(chan event.GenericEvent, 1)
	poke := func() {
		// Let the kubelet record the assignment before asking PodResources.
		time.AfterFunc(500*time.Millisecond, func() {
			select {
			case trigger <- event.GenericEvent{Object: &slicerv1alpha1.NodeAccelerator{ObjectMeta: metav1.ObjectMeta{Name: f.node}}}:
			default:
			}
		})
	}
	var (
		usage     agent.UsageSource
		kubelet   agent.KubeletDevices
		preferrer plugin.Preferrer
	)
	if f.podResources != "" {
		pr := &podresources.Client{Socket: f.podResources}
		usage, kubelet = pr, pr
		// Without the kubelet's pod list the chooser cannot tell which pod is
		// being admitted: the kubelet then chooses alone.
		preferrer = &agent.Chooser{Cache: mgr.GetCache(), Live: mgr.GetAPIReader(), Node: f.node, Kubelet: pr, Log: log.WithName("prefer")}
		// The chooser reads the node's pods from the cache: start their informer with it.
		if _, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{}); err != nil {
			return fmt.Errorf("pod informer: %w", err)
		}
	}
	cdiWriter := &cdi.Writer{Dir: f.cdiDir, Real: f.emulate == ""}
	pm := plugin.NewManager(plugin.Options{Dir: f.pluginDir, Resources: resources, Registrations: metrics.Registrations,
		Allocates: metrics.AllocateResults, OnAllocate: poke, Preferrer: preferrer, CDI: cdiWriter}, log.WithName("device-plugin"))
	r := agent.New(mgr.GetClient(), mgr.GetEventRecorder(slicerv1alpha1.AgentName), agent.Options{
		NodeName: f.node, Library: lib, Emulated: f.emulate != "", CDI: cdiWriter,
		Usage: usage, Kubelet: kubelet, Advertiser: pm, OrphanGrace: f.grace, Resync: f.resync, Metrics: metrics, Live: mgr.GetAPIReader(),
		GPUModes: gpuModes,
	})
	if err := r.SetupWithManager(mgr, trigger); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(pm.Run)); err != nil {
		return fmt.Errorf("add device plugin: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	log.Info("starting", "node", f.node, "gpuModePolicies", len(gpuModes), "cdiDir", f.cdiDir, "devicePluginDir", f.pluginDir,
		"metrics", f.listen.MetricsAddr, "secureMetrics", f.listen.SecureMetrics, "health", f.listen.ProbeAddr)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// realResources lists the resources of the node's MIG GPUs; none when NVML is
// not usable yet (the plugin serves resources as slices appear).
func realResources(lib nvml.Library) []string {
	if err := lib.Init(); err != nil {
		ctrl.Log.Info("NVML not usable at start; the agent reports DriverNotReady and retries", "error", err.Error())
		return nil
	}
	defer func() {
		if err := lib.Shutdown(); err != nil {
			ctrl.Log.Error(err, "NVML shutdown")
		}
	}()
	n, err := lib.DeviceCount()
	if err != nil {
		return nil
	}
	var models []mig.Model
	for i := 0; i < n; i++ {
		d, err := lib.Device(i)
		if err != nil {
			continue
		}
		name, _ := d.Name()
		mem, _ := d.MemoryMiB()
		pci, _ := d.PCIDeviceID()
		if m, err := mig.ModelForDevice(pci, name, mem); err == nil {
			models = append(models, m)
		}
	}
	return plugin.ResourcesFor(models)
}

func scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(slicerv1alpha1.AddToScheme(s))
	return s
}
