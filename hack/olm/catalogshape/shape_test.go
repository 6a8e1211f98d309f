// Package catalogshape_test checks that Slicer's bundle renders into a file-based catalog of the
// shape certified catalogs use (OpenShift 4.17+): the bundle as an image in a registry,
// rendered by digest with operator-registry's render action and the
// bundle-object-to-csv-metadata migration, as `opm render --migrate-level
// bundle-object-to-csv-metadata` does. The registry is go-containerregistry's, in process on
// 127.0.0.1. The OLM suite (test/olm) installs from inline objects instead:
// docs/olm-testing.md says why.
package catalogshape_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/sirupsen/logrus"
	"sigs.k8s.io/yaml"

	"github.com/operator-framework/operator-registry/alpha/action"
	"github.com/operator-framework/operator-registry/alpha/action/migrations"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/operator-framework/operator-registry/pkg/image/containerdregistry"
)

// bundleDir is the shipped bundle (make bundle).
var bundleDir = filepath.Join("..", "..", "..", "bundle")

func TestBundleImageRendersInCertifiedShape(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("registry listens on %s, want 127.0.0.1", host)
	}

	img := bundleImage(t)
	tag, err := name.NewTag(host+"/slicer-operator/slicer-operator-bundle:test", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push bundle image: %v", err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/slicer-operator/slicer-operator-bundle@" + digest.String()

	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	reg, err := containerdregistry.NewRegistry(containerdregistry.WithPlainHTTP(true),
		containerdregistry.WithCacheDir(t.TempDir()), containerdregistry.WithLog(logrus.NewEntry(quiet)))
	if err != nil {
		t.Fatalf("registry client: %v", err)
	}
	defer reg.Destroy()
	mig, err := migrations.NewMigrations("bundle-object-to-csv-metadata")
	if err != nil {
		t.Fatal(err)
	}
	render := action.Render{Refs: []string{ref}, Registry: reg, AllowedRefMask: action.RefBundleImage, Migrations: mig}
	cfg, err := render.Run(ctx)
	if err != nil {
		t.Fatalf("render %s: %v", ref, err)
	}

	if len(cfg.Bundles) != 1 {
		t.Fatalf("rendered %d bundles, want 1", len(cfg.Bundles))
	}
	b := cfg.Bundles[0]
	if b.Image != ref {
		t.Errorf("bundle image %q, want the digest reference %q", b.Image, ref)
	}
	if b.Package != "slicer-operator" || !strings.HasPrefix(b.Name, "slicer-operator.v") {
		t.Errorf("bundle %s of package %s", b.Name, b.Package)
	}
	kinds := map[string]int{}
	for _, p := range b.Properties {
		kinds[p.Type]++
	}
	for _, want := range []string{property.TypePackage, property.TypeGVK, property.TypeCSVMetadata} {
		if kinds[want] == 0 {
			t.Errorf("bundle has no %s property (properties: %v)", want, kinds)
		}
	}
	if kinds[property.TypeBundleObject] != 0 {
		t.Errorf("bundle has %d %s properties, want none", kinds[property.TypeBundleObject], property.TypeBundleObject)
	}
	if len(b.RelatedImages) == 0 {
		t.Error("bundle has no related images")
	}

	// The package and channel around it, as a catalog maintainer adds them (opm init, a channel
	// entry), and the whole catalog must be valid: it converts to the model OLM serves.
	cfg.Packages = []declcfg.Package{{Schema: declcfg.SchemaPackage, Name: b.Package, DefaultChannel: "candidate"}}
	cfg.Channels = []declcfg.Channel{{Schema: declcfg.SchemaChannel, Package: b.Package, Name: "candidate",
		Entries: []declcfg.ChannelEntry{{Name: b.Name, Replaces: csvReplaces(t)}}}}
	if _, err := declcfg.ConvertToModel(*cfg); err != nil {
		t.Fatalf("catalog does not validate: %v", err)
	}
	var out bytes.Buffer
	if err := declcfg.WriteYAML(*cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"olm.package", "olm.channel", "olm.bundle", "olm.csv.metadata"} {
		if !strings.Contains(out.String(), schema) {
			t.Errorf("rendered catalog lacks %s", schema)
		}
	}
	if strings.Contains(out.String(), "olm.bundle.object") {
		t.Error("rendered catalog has olm.bundle.object")
	}
}

// bundleImage is bundle/ as bundle.Dockerfile builds it: manifests/ and metadata/ at the root
// of one layer, and metadata/annotations.yaml's annotations as labels.
func bundleImage(t *testing.T) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(bundleDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(bundleDir, path)
		if err != nil || rel == "." || !(strings.HasPrefix(rel, "manifests") || strings.HasPrefix(rel, "metadata")) {
			return err
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(raw))}); err != nil {
			return err
		}
		_, err = tw.Write(raw)
		return err
	})
	if err != nil {
		t.Fatalf("bundle layer: %v", err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	raw, err := os.ReadFile(filepath.Join(bundleDir, "metadata", "annotations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &ann); err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Labels = ann.Annotations
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// csvReplaces is spec.replaces of the shipped CSV.
func csvReplaces(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(bundleDir, "manifests", "slicer-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var csv struct {
		Spec struct {
			Replaces string `json:"replaces"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &csv); err != nil {
		t.Fatal(err)
	}
	return csv.Spec.Replaces
}
