package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/releasehook"
)

// uninstallReleaseCmd is the subcommand the Helm chart's pre-delete hook runs
// (operator/releasehook): it deletes the release's Slicers and waits until the
// operator's teardown has removed them, or fails after --timeout saying what is left.
const uninstallReleaseCmd = "uninstall-release"

// uninstallRelease runs the subcommand with args (those after its name); it
// returns the process's exit status.
func uninstallRelease(args []string) int {
	fs := flag.NewFlagSet(uninstallReleaseCmd, flag.ContinueOnError)
	var o releasehook.Options
	fs.StringVar(&o.ReleaseName, "release-name", "", "The Helm release's name (.Release.Name).")
	fs.StringVar(&o.ReleaseNamespace, "release-namespace", "", "The Helm release's namespace (.Release.Namespace).")
	fs.DurationVar(&o.Timeout, "timeout", 4*time.Minute, "How long to wait for the release's Slicers to be gone before failing with what is left.")
	fs.DurationVar(&o.Poll, "poll", releasehook.DefaultPoll, "How often to look at the Slicers while waiting.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Finalizer = controller.Finalizer
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "uninstall-release: kubeconfig:", err)
		return 1
	}
	scheme := runtime.NewScheme()
	if err := slicerv1alpha1.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, "uninstall-release: scheme:", err)
		return 1
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, "uninstall-release: client:", err)
		return 1
	}
	// The context outlives the timeout a little, so that Run, not the context, says what is left.
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout+time.Minute)
	defer cancel()
	if err := releasehook.Run(ctx, c, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "uninstall-release:", err)
		// The pod's termination message (kubectl describe) says it too.
		_ = os.WriteFile("/dev/termination-log", []byte(err.Error()), 0o644)
		return 1
	}
	return 0
}
