// Package cli is the slicer command: subcommand dispatch and flags (standard library flag
// only). cmd/slicer/main.go calls Run; tests call it too, with their own writers.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/slicemap"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // the command ran and failed (cluster unreachable, ...)
	ExitUsage = 2 // bad subcommand or flags
)

// Version is the CLI's version; release builds set it with
// -ldflags "-X github.com/slicer-operator/slicer/cmd/slicer/cli.Version=0.1.0".
var Version = ""

const usage = `slicer: Slicer's command-line tool.

Usage:
  slicer slice-map [--kubeconfig FILE] [--context NAME] [--node NAME] [-o text|json] [--timeout D]
      Print, per node and GPU, the MIG slice map: an occupancy bar of the memory
      slices, each realized slice with what holds it (a SliceAllocation, or in DRA
      mode a ResourceClaim) and its pod(s), the allocations not realized and the
      claims not prepared yet, and the Pending pods that ask for MIG slices, each
      with why no GPU can take it.
  slicer right-size --prometheus URL [--window D] [-o text|json] [--timeout D]
      Print the pods whose peak framebuffer use over the window (default 6h), from
      DCGM exporter joined to Slicer's slices by the shipped recording rules, fits a
      smaller MIG profile of their GPU: the next smaller profile and the smallest
      that still holds the peak (nominal memory, internal/mig).
  slicer version
      Print the version.
  slicer help
      Print this help.

The kubeconfig is --kubeconfig, else $KUBECONFIG, else ~/.kube/config.
`

// Run runs the slicer command with args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "slice-map":
		return sliceMap(ctx, args[1:], stdout, stderr)
	case "right-size":
		return rightSize(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "slicer", version())
		return ExitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "slicer: unknown command %q\n\n%s", args[0], usage)
		return ExitUsage
	}
}

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func sliceMap(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("slicer slice-map", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "path to the kubeconfig (default $KUBECONFIG, else ~/.kube/config)")
	kubeContext := fs.String("context", "", "kubeconfig context to use (default the current context)")
	node := fs.String("node", "", "show only this node")
	output := fs.String("o", "text", "output format: text|json")
	timeout := fs.Duration("timeout", 30*time.Second, "give up reading the cluster after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "slicer slice-map: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return ExitUsage
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "slicer slice-map: -o must be text or json, not %q\n", *output)
		return ExitUsage
	}
	cfg, err := restConfig(*kubeconfig, *kubeContext)
	if err != nil {
		fmt.Fprintln(stderr, "slicer slice-map:", err)
		return ExitError
	}
	scheme := k8sruntime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), slicerv1alpha1.AddToScheme(scheme)); err != nil {
		fmt.Fprintln(stderr, "slicer slice-map: scheme:", err)
		return ExitError
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(stderr, "slicer slice-map: client:", err)
		return ExitError
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	in, err := slicemap.Fetch(ctx, c, *node)
	if err != nil {
		fmt.Fprintln(stderr, "slicer slice-map:", err)
		return ExitError
	}
	m := slicemap.Build(in, slicemap.Options{Node: *node})
	if *output == "json" {
		err = slicemap.WriteJSON(stdout, m)
	} else {
		err = slicemap.WriteText(stdout, m)
	}
	if err != nil {
		fmt.Fprintln(stderr, "slicer slice-map:", err)
		return ExitError
	}
	return ExitOK
}

// restConfig loads the kubeconfig the client-go way: the explicit path, else $KUBECONFIG
// (a list of files), else ~/.kube/config.
func restConfig(path, kubeContext string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "slicer/" + version()
	return cfg, nil
}
