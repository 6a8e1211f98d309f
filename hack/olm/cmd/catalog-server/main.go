// Command catalog-server serves a file-based catalog (FBC) over OLM's registry gRPC API, the
// API a grpc CatalogSource with spec.address talks to. It runs the same operator-registry
// packages as `opm serve` (pkg/cache, pkg/server) but listens only where -addr says, which must
// be a loopback address (`opm serve` binds every interface, also starts a pprof listener and
// writes /etc/nsswitch.conf when absent). The catalog is read once at start: to serve another
// catalog, restart it (a CatalogSource re-lists on reconnect).
//
//	catalog-server -dir CATALOG_DIR -addr 127.0.0.1:50051
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/operator-framework/operator-registry/pkg/api"
	"github.com/operator-framework/operator-registry/pkg/cache"
	"github.com/operator-framework/operator-registry/pkg/server"
)

func main() {
	dir := flag.String("dir", "", "file-based catalog directory to serve")
	addr := flag.String("addr", "127.0.0.1:50051", "loopback address to listen on")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *dir, *addr, log); err != nil {
		log.Error("catalog-server failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir, addr string, log *slog.Logger) error {
	if dir == "" {
		return fmt.Errorf("-dir is required")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %q: host must be a loopback IP", addr)
	}
	cacheDir, err := os.MkdirTemp("", "catalog-server-")
	if err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	defer os.RemoveAll(cacheDir)

	// operator-registry logs through logrus; its messages are not needed here.
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	store, err := cache.New(cacheDir, cache.WithLog(logrus.NewEntry(quiet)))
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	defer store.Close()
	if err := cache.LoadOrRebuild(ctx, store, os.DirFS(dir)); err != nil {
		return fmt.Errorf("load catalog %s: %w", dir, err)
	}

	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := grpc.NewServer()
	api.RegisterRegistryServer(srv, server.NewRegistryServer(store))
	healthv1.RegisterHealthServer(srv, server.NewHealthServer())
	reflection.Register(srv)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	log.Info("serving catalog", "addr", lis.Addr().String(), "dir", dir)
	if err := srv.Serve(lis); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}
