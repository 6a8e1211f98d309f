// Package parsetest parses images/*.Containerfile with BuildKit's own
// Dockerfile parser and checks the certification rules that can be checked
// without building (docs/design/invariants.md, image conventions): a UBI base, the required labels,
// /licenses, a numeric non-root USER (the agent documents why it is root),
// at most 40 layers, a VERSION build argument, and a builder stage that
// copies every directory the binary's packages live in. It is a separate
// module so BuildKit stays out of Slicer's dependency graph.
package parsetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// component is one image and the main package it ships.
type component struct {
	name, pkg string
	root      bool // runs as root (documented in the Containerfile)
}

var components = []component{
	{name: "operator", pkg: "./operator/cmd/slicer-operator"},
	{name: "scheduler", pkg: "./scheduler/cmd/slicer-scheduler"},
	{name: "webhook", pkg: "./webhook/cmd/slicer-webhook"},
	{name: "agent", pkg: "./device-plugin/cmd/slicer-agent", root: true},
}

// requiredLabels are the labels preflight's HasRequiredLabel wants.
var requiredLabels = []string{"name", "vendor", "version", "release", "summary", "description", "maintainer"}

const (
	repoRoot     = "../.."
	ubiMinimal   = "registry.access.redhat.com/ubi9/ubi-minimal:"
	maxLayers    = 40
	baseLayers   = 1 // ubi-minimal is one layer
	userNonRoot  = `^[1-9][0-9]*(:[0-9]+)?$`
	trademarkPat = `(?i)red ?hat|openshift|nvidia`
)

type parsed struct {
	raw    string
	stages []instructions.Stage
	args   map[string]string // meta ARG defaults
}

func parse(t *testing.T, path string) parsed {
	t.Helper()
	raw, err := os.ReadFile(path)
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
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("instructions: %v", err)
	}
	for _, w := range res.Warnings {
		warnings = append(warnings, w.Short)
	}
	if len(warnings) > 0 {
		t.Errorf("BuildKit warnings: %v", warnings)
	}
	args := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Value != nil {
				args[kv.Key] = *kv.Value
			} else {
				args[kv.Key] = ""
			}
		}
	}
	return parsed{raw: string(raw), stages: stages, args: args}
}

func TestContainerfiles(t *testing.T) {
	for _, c := range components {
		t.Run(c.name, func(t *testing.T) {
			p := parse(t, filepath.Join(repoRoot, "images", c.name+".Containerfile"))
			checkContainerfile(t, c, p)
		})
	}
}

func checkContainerfile(t reporter, c component, p parsed) {
	t.Helper()
	if len(p.stages) != 2 || p.stages[0].Name != "builder" {
		t.Fatalf("want a builder stage and a final stage, got %d stages", len(p.stages))
	}
	builder, final := p.stages[0], p.stages[1]

	base := os.Expand(final.BaseName, func(k string) string { return p.args[k] })
	if !strings.HasPrefix(base, ubiMinimal) || strings.HasSuffix(base, ":latest") {
		t.Errorf("final base %q is not a pinned %s tag", base, ubiMinimal)
	}

	labels := map[string]string{}
	var users []string
	var entrypoint []string
	var stageArgs = map[string]bool{}
	layers := baseLayers
	licenses := false
	for _, cmd := range final.Commands {
		switch cmd := cmd.(type) {
		case *instructions.LabelCommand:
			for _, kv := range cmd.Labels {
				labels[kv.Key] = strings.Trim(kv.Value, `"`)
			}
		case *instructions.UserCommand:
			users = append(users, cmd.User)
		case *instructions.EntrypointCommand:
			entrypoint = cmd.CmdLine
			if !cmd.PrependShell {
				break
			}
			t.Errorf("ENTRYPOINT in shell form: %v", cmd.CmdLine)
		case *instructions.ArgCommand:
			for _, kv := range cmd.Args {
				stageArgs[kv.Key] = true
			}
		case *instructions.CopyCommand:
			layers++
			if cmd.DestPath == "/licenses/" && cmd.From == "" {
				licenses = true
				for _, src := range cmd.SourcePaths {
					if files, _ := os.ReadDir(filepath.Join(repoRoot, src)); len(files) == 0 {
						t.Errorf("/licenses comes from %s, which holds no file", src)
					}
				}
			}
		case *instructions.RunCommand, *instructions.AddCommand:
			layers++
		}
	}
	for _, l := range requiredLabels {
		if labels[l] == "" {
			t.Errorf("label %q missing", l)
		}
	}
	if labels["version"] != "${VERSION}" || !stageArgs["VERSION"] || !stageArgs["RELEASE"] {
		t.Errorf("version label %q is not from ARG VERSION (stage args %v)", labels["version"], stageArgs)
	}
	if labels["name"] != "slicer-"+c.name {
		t.Errorf("label name = %q, want slicer-%s", labels["name"], c.name)
	}
	for _, l := range []string{"name", "vendor", "maintainer"} {
		if regexp.MustCompile(trademarkPat).MatchString(labels[l]) {
			t.Errorf("label %s = %q uses a trademark", l, labels[l])
		}
	}
	if !licenses {
		t.Error("no COPY of license files into /licenses/")
	}
	if layers > maxLayers {
		t.Errorf("%d layers, want <= %d", layers, maxLayers)
	}
	if len(users) == 0 {
		t.Fatal("no USER in the final stage")
	}
	user := users[len(users)-1]
	if c.root {
		if user != "0" || !strings.Contains(p.raw, "Host Level") || !strings.Contains(p.raw, "privileged") {
			t.Errorf("USER %q: a root image must say USER 0 and document why (Host Level Access: Privileged)", user)
		}
	} else if !regexp.MustCompile(userNonRoot).MatchString(user) {
		t.Errorf("USER %q is not a numeric non-root user", user)
	}
	bin := "/usr/local/bin/slicer-" + c.name
	if len(entrypoint) != 1 || entrypoint[0] != bin {
		t.Errorf("ENTRYPOINT %v, want [%s]", entrypoint, bin)
	}

	// The builder builds c.pkg and copies every directory it needs.
	copied := map[string]bool{}
	builds := false
	for _, cmd := range builder.Commands {
		switch cmd := cmd.(type) {
		case *instructions.CopyCommand:
			for _, src := range cmd.SourcePaths {
				copied[strings.TrimSuffix(src, "/")] = true
			}
		case *instructions.RunCommand:
			line := strings.Join(cmd.CmdLine, " ")
			builds = builds || (strings.Contains(line, "go build") && strings.Contains(line, c.pkg) && strings.Contains(line, "-o /out/slicer-"+c.name))
		}
	}
	if !builds {
		t.Errorf("the builder does not `go build -o /out/slicer-%s %s`", c.name, c.pkg)
	}
	var missing []string
	for _, d := range packageDirs(t, c.pkg) {
		if !copied[d] {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the builder does not COPY %v, which %s imports", missing, c.pkg)
	}
}

// packageDirs are the top-level directories of the module's packages pkg
// depends on (itself included).
func packageDirs(t reporter, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	const module = "github.com/slicer-operator/slicer/"
	dirs := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, module); ok {
			dirs[strings.SplitN(rest, "/", 2)[0]] = true
		}
	}
	var list []string
	for d := range dirs {
		list = append(list, d)
	}
	sort.Strings(list)
	return list
}

// TestChecksCatchBadContainerfiles shows the checks can fail: a root USER
// without a reason, a missing label and a :latest base are reported.
func TestChecksCatchBadContainerfiles(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "images", "webhook.Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(raw), "USER 65532:65532", "USER root", 1)
	bad = strings.Replace(bad, `      vendor="The Slicer Authors" \`+"\n", "", 1)
	bad = strings.Replace(bad, "ubi-minimal:9.6", "ubi-minimal:latest", 1)
	if bad == string(raw) {
		t.Fatal("nothing replaced")
	}
	path := filepath.Join(t.TempDir(), "bad.Containerfile")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{T: t}
	p := parse(t, path)
	func() {
		defer func() {
			if r := recover(); r != nil && r != errStop {
				panic(r)
			}
		}()
		checkContainerfile(rec, component{name: "webhook", pkg: "./webhook/cmd/slicer-webhook"}, p)
	}()
	want := []string{`USER "root"`, `label "vendor" missing`, "ubi-minimal:latest"}
	for _, w := range want {
		found := false
		for _, e := range rec.errs {
			found = found || strings.Contains(e, w)
		}
		if !found {
			t.Errorf("no error mentioning %q; got %q", w, rec.errs)
		}
	}
}

// reporter is what checkContainerfile needs of a *testing.T.
type reporter interface {
	Helper()
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

var errStop = errors.New("fatal check")

// recorder collects the errors of a check that is expected to fail.
type recorder struct {
	*testing.T
	errs []string
}

func (r *recorder) Error(args ...any) { r.errs = append(r.errs, fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); panic(errStop) }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); panic(errStop) }
