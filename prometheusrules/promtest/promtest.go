// Package promtest finds the Prometheus binaries the monitoring tests run
// (promtool, prometheus) and runs promtool. hack/install-prometheus.sh puts
// them into bin/prometheus/; `make test` runs it first.
package promtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// RepoRoot is the directory of the main module's go.mod.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("promtest: cannot locate source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary returns the path of "promtool" or "prometheus": $PROMTOOL or
// $PROMETHEUS when set, else bin/prometheus/<name> in the repository. The
// error names the script that installs them.
func Binary(name string) (string, error) {
	path := os.Getenv(strings.ToUpper(name))
	if path == "" {
		path = filepath.Join(RepoRoot(), "bin", "prometheus", name)
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s not found at %s: run hack/install-prometheus.sh (make test does) or set $%s: %w", name, path, strings.ToUpper(name), err)
	}
	return path, nil
}

// Promtool runs promtool with args in dir and returns its combined output;
// a non-zero exit is an error carrying that output.
func Promtool(dir string, args ...string) (string, error) {
	bin, err := Binary("promtool")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("promtool %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}
