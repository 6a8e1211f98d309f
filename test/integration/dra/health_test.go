package dra

import (
	"context"
	"testing"
	"time"

	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// The kubelet's health stream, over the plugin's socket: the devices of a prepared claim are
// reported Healthy; when NVML fails on one GPU, that GPU's device turns Unhealthy with the
// reason while the other GPU's stays Healthy, and it turns Healthy again once NVML answers.
func TestKubeletHealthStream(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	a := h.allocate("a", "gpu-0-3g-40gb-at-4", "gpu-1-1g-10gb-at-6")
	h.prepare(a)
	stream, err := drahealthv1.NewDRAResourceHealthClient(h.plugin.conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// next reads reports until the two devices show the wanted health.
	next := func(want map[string]drahealthv1.HealthStatus) map[string]*drahealthv1.DeviceHealth {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("health stream: %v", err)
			}
			got := map[string]*drahealthv1.DeviceHealth{}
			for _, d := range resp.GetDevices() {
				got[d.GetDevice().GetDeviceName()] = d
			}
			ok := len(got) == len(want)
			for name, health := range want {
				d := got[name]
				ok = ok && d != nil && d.GetHealth() == health && d.GetDevice().GetPoolName() == nodeName
			}
			if ok {
				return got
			}
			if err := h.plugin.drv.Sync(ctx); err != nil {
				t.Logf("sync: %v", err)
			}
		}
		t.Fatalf("the health stream never reported %v", want)
		return nil
	}

	healthy := map[string]drahealthv1.HealthStatus{"gpu-0-3g-40gb-at-4": drahealthv1.HealthStatus_HEALTHY, "gpu-1-1g-10gb-at-6": drahealthv1.HealthStatus_HEALTHY}
	got := next(healthy)
	if d := got["gpu-0-3g-40gb-at-4"]; d.GetHealthCheckTimeoutSeconds() <= 0 || d.GetLastUpdatedTime() <= 0 {
		t.Fatalf("report without a timeout or a time: %+v", d)
	}

	// The next observation of GPU 0 fails (its MIG mode cannot be read).
	h.lib.InjectFault("DeviceGetMigMode", nvml.ErrorGPUIsLost, 1)
	if err := h.plugin.drv.Sync(ctx); err != nil {
		t.Logf("sync: %v", err)
	}
	got = next(map[string]drahealthv1.HealthStatus{"gpu-0-3g-40gb-at-4": drahealthv1.HealthStatus_UNHEALTHY, "gpu-1-1g-10gb-at-6": drahealthv1.HealthStatus_HEALTHY})
	if msg := got["gpu-0-3g-40gb-at-4"].GetMessage(); msg == "" {
		t.Fatal("an unhealthy device without a reason")
	} else {
		t.Logf("unhealthy: %s", msg)
	}

	// NVML answers again: the next sync reports it Healthy.
	if err := h.plugin.drv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	next(healthy)

	// Unprepared and deallocated, the claim's devices leave the report.
	h.unprepare(a)
	h.deleteClaim(a)
	deadline := time.Now().Add(time.Minute)
	for {
		if err := h.plugin.drv.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetDevices()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("devices still reported after the claim went: %v", resp.GetDevices())
		}
	}
}
