package dra

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

func TestDeviceHealthFollowsTheHoldingGPU(t *testing.T) {
	m := h100(t)
	obs := &engine.Observation{GPUs: []*engine.GPU{
		{Index: 0, UUID: "GPU-0", Model: m, Healthy: true, MIGMode: nvml.MIGEnabled},
		{Index: 1, UUID: "GPU-1", Model: m, Healthy: false, Err: errors.New("device 1 instances: GPU is lost"), MIGMode: nvml.MIGEnabled},
		{Index: 2, UUID: "GPU-2", Model: m, Healthy: true, MIGMode: nvml.MIGDisabled},
	}}
	held := map[string][]string{
		"gpu-0-1g.10gb-at-3": {"c1"},
		"gpu-1-3g.40gb-at-4": {"c2"},
		"gpu-2-1g.10gb-at-0": {"c3"},
		"gpu-5-1g.10gb-at-0": {"c4"},
		"gpu-0-whole":        {"c5"},
	}
	at := time.Unix(100, 0)
	got := map[string]kubeletplugin.HealthStatus{}
	for _, h := range deviceHealth(obs, held, "node-a", at, time.Minute) {
		if h.PoolName != "node-a" || !h.LastUpdated.Equal(at) || h.HealthCheckTimeout != time.Minute {
			t.Fatalf("%s: pool %q, at %v, timeout %v", h.DeviceName, h.PoolName, h.LastUpdated, h.HealthCheckTimeout)
		}
		if h.Health != kubeletplugin.HealthStatusHealthy && h.Message == "" {
			t.Fatalf("%s is %s without a reason", h.DeviceName, h.Health)
		}
		got[h.DeviceName] = h.Health
	}
	want := map[string]kubeletplugin.HealthStatus{
		"gpu-0-1g.10gb-at-3": kubeletplugin.HealthStatusHealthy,
		"gpu-1-3g.40gb-at-4": kubeletplugin.HealthStatusUnhealthy, // NVML fails on the GPU
		"gpu-2-1g.10gb-at-0": kubeletplugin.HealthStatusUnhealthy, // MIG mode is off
		"gpu-5-1g.10gb-at-0": kubeletplugin.HealthStatusUnhealthy, // the GPU is gone
		"gpu-0-whole":        kubeletplugin.HealthStatusUnknown,   // not a name this driver makes
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("health (-want +got):\n%s", d)
	}
	for _, h := range deviceHealth(nil, held, "node-a", at, time.Minute) {
		if h.Health != kubeletplugin.HealthStatusUnknown {
			t.Fatalf("%s without an observation: %s, want Unknown", h.DeviceName, h.Health)
		}
	}
}

func TestHealthStreamSendsAtOnceOnChangeAndMarksStaleReportsUnknown(t *testing.T) {
	b := newHealthBook()
	t0 := time.Unix(1000, 0)
	now := t0
	b.set([]kubeletplugin.DeviceHealth{{PoolName: "n", DeviceName: "gpu-0-1g.10gb-at-0", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: t0}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- b.stream(ctx, reports, time.Hour, time.Minute, func() time.Time { return now }) }()

	first := <-reports
	if len(first.Devices) != 1 || first.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("initial report: %+v", first)
	}
	// The same health again (a later sync) wakes nobody; a change is sent at once.
	b.set([]kubeletplugin.DeviceHealth{{PoolName: "n", DeviceName: "gpu-0-1g.10gb-at-0", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: t0}})
	b.set([]kubeletplugin.DeviceHealth{{PoolName: "n", DeviceName: "gpu-0-1g.10gb-at-0", Health: kubeletplugin.HealthStatusUnhealthy, Message: "lost", LastUpdated: t0}})
	second := <-reports
	if len(second.Devices) != 1 || second.Devices[0].Health != kubeletplugin.HealthStatusUnhealthy {
		t.Fatalf("report after the change: %+v", second)
	}
	// A report no sync refreshed for longer than stale is sent as Unknown.
	now = t0.Add(2 * time.Minute)
	b.set([]kubeletplugin.DeviceHealth{{PoolName: "n", DeviceName: "gpu-0-1g.10gb-at-0", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: t0}})
	third := <-reports
	if third.Devices[0].Health != kubeletplugin.HealthStatusUnknown {
		t.Fatalf("stale report sent as %s", third.Devices[0].Health)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stream returned %v after cancel", err)
	}
}
