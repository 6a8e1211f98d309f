// Package parsetest parses driver-container/Containerfile with BuildKit's
// own Dockerfile parser and checks what certification and KMM need. It is a
// separate module so BuildKit stays out of Slicer's dependency graph.
package parsetest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

func parse(t *testing.T) ([]instructions.Stage, []instructions.ArgCommand) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := parser.Parse(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	var warnings []string
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, _ []parser.Range) {
		warnings = append(warnings, rule+": "+msg)
	}})
	stages, args, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("instructions: %v", err)
	}
	for _, w := range res.Warnings {
		warnings = append(warnings, w.Short)
	}
	if len(warnings) > 0 {
		t.Errorf("BuildKit warnings: %v", warnings)
	}
	return stages, args
}

func TestContainerfile(t *testing.T) {
	stages, metaArgs := parse(t)
	if len(stages) != 2 || stages[0].Name != "builder" {
		t.Fatalf("want a builder stage and a final stage, got %d stages", len(stages))
	}
	args := map[string]bool{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			args[kv.Key] = true
		}
	}
	// KMM passes DTK_AUTO (the Driver Toolkit image of the node's kernel).
	if !args["DTK_AUTO"] || stages[0].BaseName != "${DTK_AUTO}" {
		t.Errorf("builder is not FROM ${DTK_AUTO}: %q, meta args %v", stages[0].BaseName, args)
	}
	final := stages[1]
	labels := map[string]string{}
	var user string
	var copies []*instructions.CopyCommand
	for _, c := range final.Commands {
		switch x := c.(type) {
		case *instructions.RunCommand:
			// No package manager in the final image: no kernel packages.
			t.Errorf("final stage runs %q: it must only copy artefacts", x.String())
		case *instructions.LabelCommand:
			for _, kv := range x.Labels {
				labels[kv.Key] = kv.Value
			}
		case *instructions.UserCommand:
			user = x.User
		case *instructions.CopyCommand:
			copies = append(copies, x)
		case *instructions.AddCommand:
			t.Errorf("final stage uses ADD %v", x.SourcePaths)
		}
	}
	for _, k := range []string{"name", "vendor", "version", "release", "summary", "description", "maintainer"} {
		if labels[k] == "" {
			t.Errorf("certification label %q missing", k)
		}
	}
	for k, v := range labels {
		if strings.Contains(v, "Red Hat") || strings.Contains(v, "OpenShift") {
			t.Errorf("label %s=%q uses a trademark", k, v)
		}
	}
	if user == "" || user == "0" || user == "root" {
		t.Errorf("final USER %q is root", user)
	}
	dests := map[string]bool{}
	for _, c := range copies {
		// KMM builds from a ConfigMap: there is no build context to copy from.
		if c.From != "builder" {
			t.Errorf("COPY %v does not come from the builder stage", c.SourcePaths)
		}
		dests[c.DestPath] = true
	}
	for _, d := range []string{"/opt/lib/modules", "/firmware", "/licenses"} {
		if !dests[d] {
			t.Errorf("final image lacks %s (have %v)", d, dests)
		}
	}
	for _, c := range stages[0].Commands {
		if cp, ok := c.(*instructions.CopyCommand); ok && cp.From == "" {
			t.Errorf("builder copies %v from the build context, which KMM does not provide", cp.SourcePaths)
		}
	}
}

// Every download is checked against its checksum build ARG (README.md,
// supply chain), and REQUIRE_PINNED exists to make the checks mandatory.
func TestDownloadsAreVerified(t *testing.T) {
	stages, _ := parse(t)
	args := map[string]bool{}
	downloads := 0
	for _, c := range stages[0].Commands {
		switch x := c.(type) {
		case *instructions.ArgCommand:
			for _, kv := range x.Args {
				args[kv.Key] = true
			}
		case *instructions.RunCommand:
			run := x.String()
			for _, part := range strings.Split(run, "curl ")[1:] {
				downloads++
				out := strings.Fields(strings.TrimPrefix(part, "-fsSL -o "))[0]
				if !strings.Contains(run, "sh /build/verify.sh "+out+" ") {
					t.Errorf("the download to %s is not checked with /build/verify.sh: %s", out, run)
				}
			}
		}
	}
	if downloads != 2 {
		t.Errorf("%d downloads, want the source tarball and the runfile", downloads)
	}
	for _, a := range []string{"DRIVER_SOURCE_SHA256", "DRIVER_RUNFILE_SHA256", "REQUIRE_PINNED"} {
		if !args[a] {
			t.Errorf("the builder stage has no ARG %s", a)
		}
	}
}
