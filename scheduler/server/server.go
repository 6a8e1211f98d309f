// Package server runs kube-scheduler with the SlicerMIG plugin in-process,
// with the same wiring as the slicer-scheduler binary. Integration tests and
// bench/scheduler use it; the binary uses the cobra command.
package server

import (
	"context"
	"fmt"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/configz"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
)

// Scheduler is a running in-process scheduler.
type Scheduler struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Start builds the scheduler from a KubeSchedulerConfiguration file (see
// scheduler/config.Render) and runs it until ctx ends or Stop is called. It
// returns once the scheduler is built (the plugin's snapshot is synced).
// The secure port is disabled (127.0.0.1, port 0).
func Start(ctx context.Context, configFile string, opts plugin.Options) (*Scheduler, error) {
	ctrllog.SetLogger(klog.NewKlogr())
	// The binary gets these as --feature-gates (operator/render); the gate is process-wide.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(config.FeatureGates); err != nil {
		return nil, fmt.Errorf("scheduler feature gates: %w", err)
	}
	o := options.NewOptions()
	o.ConfigFile = configFile
	o.SecureServing.BindPort = 0
	o.SecureServing.BindAddress = []byte{127, 0, 0, 1}
	// kube-scheduler registers its configuration in a process-wide registry
	// (configz) and refuses to run twice; one scheduler at a time runs here,
	// so drop a previous registration (tests restart the scheduler).
	configz.Delete("componentconfig")
	ctx, cancel := context.WithCancel(ctx)
	cc, sched, err := app.Setup(ctx, o, app.WithPlugin(plugin.Name, plugin.NewFactory(opts)))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("set up kube-scheduler: %w", err)
	}
	s := &Scheduler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		err := app.Run(ctx, cc, sched)
		// Without leader election Run reports "finished without leader
		// elect" when ctx ends: a normal stop.
		if err != nil && ctx.Err() == nil {
			s.err = err
		}
	}()
	return s, nil
}

// Stop stops the scheduler and waits until it has returned.
func (s *Scheduler) Stop() error {
	s.cancel()
	<-s.done
	return s.err
}

// Done is closed once the scheduler has returned.
func (s *Scheduler) Done() <-chan struct{} { return s.done }
