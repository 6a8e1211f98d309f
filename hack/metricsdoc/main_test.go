package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slicer-operator/slicer/hack/metricsdoc/catalog"
	"github.com/slicer-operator/slicer/prometheusrules/promtest"
)

// TestDocUpToDate fails when docs/metrics.md differs from what the
// generator writes (a metric added, renamed or re-documented without
// regenerating).
func TestDocUpToDate(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(promtest.RepoRoot(), "docs", "metrics.md")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run `go run ./hack/metricsdoc -out docs/metrics.md`", path)
	}
}

func TestRenderListsEveryMetricOnce(t *testing.T) {
	doc, err := render()
	if err != nil {
		t.Fatal(err)
	}
	again, err := render()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, again) {
		t.Error("render is not deterministic")
	}
	metrics, err := catalog.Registered()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metrics {
		if n := strings.Count(string(doc), "| `"+m.Name+"` |"); n != 1 {
			t.Errorf("%s appears %d times as a row, want 1", m.Name, n)
		}
	}
	if cell("a|b\nc") != `a\|b c` {
		t.Errorf("cell does not escape: %q", cell("a|b\nc"))
	}
}
