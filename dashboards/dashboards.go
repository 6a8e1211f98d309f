// Package dashboards holds Slicer's Grafana dashboards, embedded so the
// operator can deliver them as ConfigMaps (Grafana sidecar or OpenShift
// console). Every dashboard has a `datasource` variable, a fixed uid and
// units on every panel; the tests lint them with grafana's dashboard-linter
// and check every query against the metrics Slicer registers.
package dashboards

import (
	"embed"
	"fmt"
	"io/fs"
)

//go:embed *.json
var files embed.FS

// Files returns the dashboards by file name (e.g. "overview.json").
func Files() (map[string][]byte, error) {
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		return nil, fmt.Errorf("list dashboards: %w", err)
	}
	out := make(map[string][]byte, len(names))
	for _, n := range names {
		data, err := files.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("read dashboard %s: %w", n, err)
		}
		out[n] = data
	}
	return out, nil
}
