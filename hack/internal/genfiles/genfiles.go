// Package genfiles holds what the generators under hack/ (the OLM bundle, the Helm chart) share:
// reading the YAML they are generated from, and writing their output tree afresh.
package genfiles

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"sigs.k8s.io/yaml"
)

// ReadYAML reads one YAML document into into.
func ReadYAML(path string, into any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// separator is a YAML document separator: "---" alone on its line.
var separator = regexp.MustCompile(`(?m)^---\s*$`)

// ReadDocs reads a multi-document YAML file; empty documents are skipped.
func ReadDocs(path string) ([]map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	var docs []map[string]any
	for _, d := range separator.Split(string(raw), -1) {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(o) > 0 {
			docs = append(docs, o)
		}
	}
	return docs, nil
}

// WriteTree replaces the directory out with files (paths relative to out), written in sorted
// order so a run is reproducible.
func WriteTree(out string, files map[string][]byte) error {
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("clean %s: %w", out, err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(out, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("mkdir: %w", err)
		}
		if err := os.WriteFile(p, files[n], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}
