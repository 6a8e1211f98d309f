// Command slicer is Slicer's command-line tool. `slicer slice-map` prints the slice map of a
// cluster: per node and GPU, which MIG slices exist, who holds them, and what waits.
//
//	slicer slice-map [--kubeconfig FILE] [--context NAME] [--node NAME] [-o text|json] [--timeout D]
//	slicer right-size --prometheus URL [--window D] [-o text|json] [--timeout D]
//	slicer version
//	slicer help
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/slicer-operator/slicer/cmd/slicer/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
