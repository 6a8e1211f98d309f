// Command slicer-scheduler is kube-scheduler with Slicer's SlicerMIG plugin
// registered. Run it with a configuration from scheduler/config.Render
// (--config); it schedules the pods whose schedulerName is the profile's.
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/slicer-operator/slicer/scheduler/plugin"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func main() {
	ctrllog.SetLogger(klog.NewKlogr())
	// kube-scheduler serves the legacy registry on /metrics; ours join it.
	factory := plugin.NewFactory(plugin.Options{Registerer: legacyregistry.Registerer()})
	cmd := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, factory))
	cmd.Use = slicerv1alpha1.SchedulerName
	if code := cli.Run(cmd); code != 0 {
		fmt.Fprintln(os.Stderr, "slicer-scheduler exited with code", code)
		os.Exit(code)
	}
}
