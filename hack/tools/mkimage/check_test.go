package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

const repoRoot = "../../.."

// componentImage builds the image images/local.sh builds for component c
// (a stand-in binary, the repository's license files), from its Containerfile.
func componentImage(t *testing.T, c string, version string) (Spec, bool) {
	t.Helper()
	cf, err := ReadContainerfile(filepath.Join(repoRoot, "images", c+".Containerfile"), map[string]string{"VERSION": version})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "slicer-"+c)
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if len(cf.Entrypoint) != 1 {
		t.Fatalf("%s: entrypoint %v, want one element", c, cf.Entrypoint)
	}
	return Spec{
		Name:       "localhost/slicer-" + c + ":dev",
		Entrypoint: cf.Entrypoint,
		User:       cf.User,
		Labels:     cf.Labels,
		Entries: []Entry{
			{Path: cf.Entrypoint[0], Source: bin},
			{Path: "/licenses/LICENSE", Source: filepath.Join(repoRoot, "images", "licenses", "LICENSE")},
		},
	}, cf.RootExplained
}

// Every component image the engine-less build makes carries the
// Containerfile's labels (VERSION substituted) and passes the checks; only
// the agent runs as root.
func TestComponentImagesPassTheChecks(t *testing.T) {
	for _, c := range []string{"operator", "scheduler", "webhook", "agent"} {
		t.Run(c, func(t *testing.T) {
			spec, root := componentImage(t, c, "9.8.7")
			if root != (c == "agent") {
				t.Errorf("USER %q: only the agent is root", spec.User)
			}
			if spec.Labels["name"] != "slicer-"+c || spec.Labels["version"] != "9.8.7" || spec.Labels["release"] != "1" {
				t.Errorf("labels name/version/release = %q/%q/%q, want slicer-%s/9.8.7/1",
					spec.Labels["name"], spec.Labels["version"], spec.Labels["release"], c)
			}
			if want := "/usr/local/bin/slicer-" + c; spec.Entrypoint[0] != want {
				t.Errorf("entrypoint %v, want %s", spec.Entrypoint, want)
			}
			img, err := Image(spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckImage(img, root); err != nil {
				t.Errorf("check: %v", err)
			}
		})
	}
}

// The checks fail an image that breaks each rule, and say which.
func TestCheckImageCatchesEachRule(t *testing.T) {
	good, _ := componentImage(t, "operator", "1.0.0")
	for name, tc := range map[string]struct {
		mutate    func(*Spec)
		allowRoot bool
		want      string
	}{
		"missing label": {mutate: func(s *Spec) { delete(s.Labels, "vendor") }, want: `label "vendor" is missing`},
		"empty label":   {mutate: func(s *Spec) { s.Labels["release"] = " " }, want: `label "release" is missing`},
		"root user":     {mutate: func(s *Spec) { s.User = "0" }, want: `user "0" is not a numeric non-root UID`},
		"named user":    {mutate: func(s *Spec) { s.User = "nobody" }, want: `user "nobody"`},
		"no user":       {mutate: func(s *Spec) { s.User = "" }, want: `user "" is not`},
		"no licenses":   {mutate: func(s *Spec) { s.Entries = s.Entries[:1] }, want: "no license file under /licenses"},
		"licenses dir only": {
			mutate: func(s *Spec) { s.Entries = append(s.Entries[:1], Entry{Path: "/licenses"}) },
			want:   "no license file under /licenses",
		},
	} {
		t.Run(name, func(t *testing.T) {
			spec := good
			spec.Labels = map[string]string{}
			for k, v := range good.Labels {
				spec.Labels[k] = v
			}
			spec.Entries = append([]Entry(nil), good.Entries...)
			tc.mutate(&spec)
			img, err := Image(spec)
			if err != nil {
				t.Fatal(err)
			}
			err = CheckImage(img, tc.allowRoot)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("check = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("too many layers", func(t *testing.T) {
		img, err := Image(good)
		if err != nil {
			t.Fatal(err)
		}
		for range MaxLayers {
			l, err := random.Layer(8, "application/vnd.oci.image.layer.v1.tar")
			if err != nil {
				t.Fatal(err)
			}
			if img, err = mutate.AppendLayers(img, l); err != nil {
				t.Fatal(err)
			}
		}
		if err := CheckImage(img, false); err == nil || !strings.Contains(err.Error(), "41 layers") {
			t.Errorf("check = %v, want too many layers", err)
		}
	})
	t.Run("root without the reason", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "Containerfile")
		if err := os.WriteFile(path, []byte("FROM scratch\n# runs as root\nUSER 0\nENTRYPOINT [\"/x\"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cf, err := ReadContainerfile(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cf.User != "0" || cf.RootExplained {
			t.Errorf("USER %q, RootExplained %v; want 0, false", cf.User, cf.RootExplained)
		}
	})
	t.Run("empty image", func(t *testing.T) {
		if err := CheckImage(empty.Image, false); err == nil {
			t.Error("an empty image passed")
		}
	})
}
