package engine

import (
	"errors"
	"testing"

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
