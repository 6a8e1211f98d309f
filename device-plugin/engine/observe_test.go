package engine

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// One answer to "can this GPU serve MIG devices" for both frontends: MIGReady for laying
// slices out (metrics, pool occupancy, allocation validation), Unusable adding health (DRA
// device health and Prepare, the device plugin's device health).
func TestUsable(t *testing.T) {
	ok := GPU{Index: 0, Model: mig.H100_80GB, MIGSupported: true, MIGMode: nvml.MIGEnabled, Healthy: true}
	unhealthy, unknown, off := ok, ok, ok
	unhealthy.Healthy, unhealthy.Err = false, errors.New("Xid 79")
	unknown.Model, unknown.ProductName = 0, "Tesla T4"
	off.MIGMode = nvml.MIGDisabled
	for _, tc := range []struct {
		name     string
		g        *GPU
		ready    bool
		unusable string
	}{
		{"MIG mode on, known model, healthy", &ok, true, ""},
		{"unhealthy", &unhealthy, true, "GPU 0 is unhealthy: Xid 79"},
		{"a model Slicer does not know", &unknown, false, "GPU 0 (Tesla T4) is not a MIG model Slicer knows"},
		{"MIG mode off", &off, false, "GPU 0 is not in MIG mode"},
		{"not on the node", nil, false, "no such GPU"},
	} {
		if tc.g != nil && tc.g.MIGReady() != tc.ready {
			t.Errorf("%s: MIGReady = %v, want %v", tc.name, !tc.ready, tc.ready)
		}
		if got := tc.g.Unusable(); got != tc.unusable {
			t.Errorf("%s: Unusable = %q, want %q", tc.name, got, tc.unusable)
		}
	}
}

// A GPU's occupants are its observed slices, complete or not, in order, holding no one.
func TestAppendOccupants(t *testing.T) {
	g := &GPU{Model: mig.H100_80GB, Slices: []Slice{
		{Slot: mig.Slot{GPU: "GPU-0", Profile: "4g.40gb", Placement: mig.Placement{Start: 0, Size: 4}}, GI: 1, CI: 0, MIGUUID: "MIG-a"},
		{Slot: mig.Slot{GPU: "GPU-0", Profile: "1g.10gb+me", Placement: mig.Placement{Start: 6, Size: 1}}, GI: 2, CI: -1},
	}}
	want := []mig.Occupant{
		{Instance: mig.Instance{Profile: "4g.40gb", Placement: mig.Placement{Start: 0, Size: 4}}},
		{Instance: mig.Instance{Profile: "1g.10gb+me", Placement: mig.Placement{Start: 6, Size: 1}}},
	}
	if diff := cmp.Diff(want, g.AppendOccupants(nil)); diff != "" {
		t.Errorf("occupants (-want +got):\n%s", diff)
	}
}
