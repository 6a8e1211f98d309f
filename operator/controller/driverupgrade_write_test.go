package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/driverupgrade"
	"github.com/slicer-operator/slicer/operator/render"
)

// TestNodeKeys: what the driver upgrade applies to a node, what it then deletes by patch, and
// when it writes nothing.
func TestNodeKeys(t *testing.T) {
	o := render.Options{AgentNamespace: "slicer-system-agent"}
	module := render.KMMModuleVersionLabel(o.AgentNamespace, render.ModuleName)
	worker := render.KMMWorkerVersionLabel(o.AgentNamespace, render.ModuleName)
	ready := render.KMMReadyLabel(o.AgentNamespace, render.ModuleName)
	const step, since = slicerv1alpha1.LabelDriverUpgrade, slicerv1alpha1.AnnotationDriverUpgradeSince
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name                string
		want                driverupgrade.Want
		labels, annotations map[string]string
		wantKeys            nodeKeys
		staleLabels         []string
		staleAnnotations    []string
		shown               bool
	}{{
		name:     "a node starts: step, since and its version",
		want:     driverupgrade.Want{Step: slicerv1alpha1.DriverUpgradeDrain, Since: at, ModuleVersion: "v1"},
		labels:   map[string]string{module: "v1", worker: "v1", ready: ""},
		wantKeys: nodeKeys{manager: DriverUpgradeFieldManager, labels: map[string]string{step: "Drain", module: "v1"}, annotations: map[string]string{since: "2026-12-01T10:00:00Z"}},
	}, {
		name:        "showing it: nothing to write",
		want:        driverupgrade.Want{Step: slicerv1alpha1.DriverUpgradeDrain, Since: at, ModuleVersion: "v1"},
		labels:      map[string]string{module: "v1", step: "Drain", "team": "a"},
		annotations: map[string]string{since: "2026-12-01T10:00:00Z"},
		wantKeys:    nodeKeys{manager: DriverUpgradeFieldManager, labels: map[string]string{step: "Drain", module: "v1"}, annotations: map[string]string{since: "2026-12-01T10:00:00Z"}},
		shown:       true,
	}, {
		name:             "released: the step's keys go, the version and KMM's worker label stay",
		want:             driverupgrade.Want{ModuleVersion: "v2"},
		labels:           map[string]string{module: "v2", worker: "v2", step: "Verify"},
		annotations:      map[string]string{since: "2026-12-01T10:00:00Z"},
		wantKeys:         nodeKeys{manager: DriverUpgradeFieldManager, labels: map[string]string{module: "v2"}, annotations: map[string]string{}},
		staleLabels:      []string{step},
		staleAnnotations: []string{since},
	}, {
		name:     "migration: both version labels in one write, under a manager of its own",
		want:     driverupgrade.Want{ModuleVersion: "v0", WorkerVersion: "v0"},
		labels:   map[string]string{ready: ""},
		wantKeys: nodeKeys{manager: DriverUpgradeMigrationFieldManager, labels: map[string]string{module: "v0", worker: "v0"}, annotations: map[string]string{}},
	}, {
		name:        "uninstall: no key",
		labels:      map[string]string{module: "v2", worker: "v2", step: "Drain"},
		wantKeys:    nodeKeys{manager: DriverUpgradeFieldManager, labels: map[string]string{}, annotations: map[string]string{}},
		staleLabels: []string{step, module},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			k := wantedKeys(o, tc.want)
			if diff := cmp.Diff(tc.wantKeys, k, cmp.AllowUnexported(nodeKeys{})); diff != "" {
				t.Errorf("wantedKeys (-want +got):\n%s", diff)
			}
			sl, sa := k.stale(o, tc.labels, tc.annotations)
			if diff := cmp.Diff(tc.staleLabels, sl); diff != "" {
				t.Errorf("stale labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.staleAnnotations, sa); diff != "" {
				t.Errorf("stale annotations (-want +got):\n%s", diff)
			}
			if got := k.shownBy(o, tc.labels, tc.annotations); got != tc.shown {
				t.Errorf("shownBy = %t, want %t", got, tc.shown)
			}
		})
	}
}

func TestDeleteKeysPatch(t *testing.T) {
	got := string(deleteKeysPatch([]string{"a/b"}, []string{"c"}))
	if want := `{"metadata":{"annotations":{"c":null},"labels":{"a/b":null}}}`; got != want {
		t.Errorf("deleteKeysPatch = %s, want %s", got, want)
	}
	if got, want := string(deleteKeysPatch([]string{"a/b"}, nil)), `{"metadata":{"labels":{"a/b":null}}}`; got != want {
		t.Errorf("deleteKeysPatch = %s, want %s", got, want)
	}
}
