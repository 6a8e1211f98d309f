// Command render-catalog renders registry+v1 bundle directories into a file-based catalog
// (one package, one channel) with operator-registry's render action. Bundles are given oldest
// first; each one's channel entry replaces the one before it. A bundle rendered from a
// directory has no image: its manifests go inline into the catalog as olm.bundle.object
// properties, and OLM installs them from there without a bundle-unpack Job (docs/olm-testing.md
// says why the suite needs that).
//
//	render-catalog -package slicer-operator -channel candidate -out DIR BUNDLE_DIR...
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/operator-framework/operator-registry/alpha/action"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/pkg/image"
)

func main() {
	pkg := flag.String("package", "slicer-operator", "package name")
	channel := flag.String("channel", "candidate", "channel name (also the default channel)")
	out := flag.String("out", "", "output directory (the catalog goes to OUT/PACKAGE/catalog.yaml)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), *pkg, *channel, *out, flag.Args(), log); err != nil {
		log.Error("render-catalog failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, pkg, channel, out string, bundles []string, log *slog.Logger) error {
	if out == "" || len(bundles) == 0 {
		return fmt.Errorf("usage: render-catalog -out DIR BUNDLE_DIR...")
	}
	render := action.Render{Refs: bundles, Registry: noRegistry{}, AllowedRefMask: action.RefBundleDir}
	cfg, err := render.Run(ctx)
	if err != nil {
		return fmt.Errorf("render %v: %w", bundles, err)
	}
	ch := declcfg.Channel{Schema: declcfg.SchemaChannel, Package: pkg, Name: channel}
	for i, b := range cfg.Bundles {
		if b.Package != pkg {
			return fmt.Errorf("bundle %s is of package %q, not %q", b.Name, b.Package, pkg)
		}
		entry := declcfg.ChannelEntry{Name: b.Name}
		if i > 0 {
			entry.Replaces = cfg.Bundles[i-1].Name
		}
		ch.Entries = append(ch.Entries, entry)
	}
	cfg.Packages = []declcfg.Package{{Schema: declcfg.SchemaPackage, Name: pkg, DefaultChannel: channel}}
	cfg.Channels = []declcfg.Channel{ch}

	dir := filepath.Join(out, pkg)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "catalog.yaml"))
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	if err := declcfg.WriteYAML(*cfg, f); err != nil {
		f.Close()
		return fmt.Errorf("write catalog: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write catalog: %w", err)
	}
	for _, e := range ch.Entries {
		log.Info("channel entry", "channel", channel, "bundle", e.Name, "replaces", e.Replaces)
	}
	return nil
}

// noRegistry is the image registry render is given for bundle directories: it is never asked
// for an image (AllowedRefMask admits directories only), and fails loudly if it is.
type noRegistry struct{}

var errNoImages = fmt.Errorf("render-catalog renders bundle directories only")

func (noRegistry) Pull(context.Context, image.Reference) error { return errNoImages }
func (noRegistry) Unpack(context.Context, image.Reference, string) error {
	return errNoImages
}
func (noRegistry) Labels(context.Context, image.Reference) (map[string]string, error) {
	return nil, errNoImages
}
func (noRegistry) Destroy() error { return nil }
