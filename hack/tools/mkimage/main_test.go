package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// untar extracts the archive's regular files into a new directory.
func untar(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, hdr.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type entry struct {
	Type     byte
	Mode     int64
	Link     string
	Contents string
}

func TestBuildRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "agent")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "img.tar")
	spec := Spec{
		Name:       "localhost/slicer-agent:dev",
		Entrypoint: []string{"/usr/local/bin/agent", "-v"},
		Env:        []string{"PATH=/bin", "A=b"},
		WorkingDir: "/",
		Entries: []Entry{
			{Path: "/usr/local/bin/agent", Source: bin},
			{Path: "/bin/sh", Link: "/usr/local/bin/agent"},
			{Path: "/tmp"},
		},
	}
	digest, err := Build(spec, out)
	if err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(tmp, "again.tar")
	digest2, err := Build(spec, again)
	if err != nil {
		t.Fatal(err)
	}
	if digest != digest2 {
		t.Errorf("build not deterministic: %s != %s", digest, digest2)
	}

	idx, err := layout.ImageIndexFromPath(untar(t, out))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if diff := cmp.Diff(map[string]string{
		"io.containerd.image.name":          "localhost/slicer-agent:dev",
		"org.opencontainers.image.ref.name": "dev",
	}, desc.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if desc.Digest != digest {
		t.Errorf("index digest %s, Build returned %s", desc.Digest, digest)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec.Entrypoint, cf.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(spec.Env, cf.Config.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got[hdr.Name] = entry{Type: hdr.Typeflag, Mode: hdr.Mode, Link: hdr.Linkname, Contents: string(data)}
	}
	want := map[string]entry{
		"bin/":                {Type: tar.TypeDir, Mode: 0o755},
		"bin/sh":              {Type: tar.TypeSymlink, Mode: 0o777, Link: "/usr/local/bin/agent"},
		"tmp/":                {Type: tar.TypeDir, Mode: 0o755},
		"usr/":                {Type: tar.TypeDir, Mode: 0o755},
		"usr/local/":          {Type: tar.TypeDir, Mode: 0o755},
		"usr/local/bin/":      {Type: tar.TypeDir, Mode: 0o755},
		"usr/local/bin/agent": {Type: tar.TypeReg, Mode: 0o755, Contents: "#!/bin/true\n"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer (-want +got):\n%s", diff)
	}
}

func TestBuildRejects(t *testing.T) {
	tmp := t.TempDir()
	for name, e := range map[string]Entry{
		"relative path":  {Path: "bin/x", Link: "y"},
		"root":           {Path: "/", Link: "y"},
		"missing source": {Path: "/x", Source: filepath.Join(tmp, "nope")},
		"directory src":  {Path: "/x", Source: tmp},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Build(Spec{Name: "localhost/x:dev", Entries: []Entry{e}}, filepath.Join(tmp, "x.tar")); err == nil {
				t.Error("Build succeeded, want an error")
			}
		})
	}
}
