package dra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// poolDeviceCount is how many devices the node's ResourceSlices list.
func (h *harness) poolDeviceCount(ctx context.Context) (int, error) {
	l, err := h.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range l.Items {
		if s.Spec.Driver == migdra.DriverName && s.Spec.Pool.Name == nodeName {
			n += len(s.Spec.Devices)
		}
	}
	return n, nil
}

func (h *harness) labelNode(value *string) {
	h.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, slicerv1alpha1.LabelNVIDIAMIGConfig)
	if value != nil {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, slicerv1alpha1.LabelNVIDIAMIGConfig, *value)
	}
	if _, err := h.cs.CoreV1().Nodes().Patch(context.Background(), nodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// A node that carries NVIDIA's MIG manager label belongs to that manager: the plugin publishes
// an empty pool, refuses to prepare (creating nothing), releases claims without destroying
// their instances, and reports OwnershipConflict; once the label goes, the pool is back and
// claims are prepared again.
func TestForeignMIGManagerOwnsTheNode(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	waitFor(t, "the node's pool", func() (bool, error) {
		n, err := h.poolDeviceCount(ctx)
		return n > 0, err
	})
	a := h.allocate("a", "gpu-0-1g-10gb-at-0")
	h.prepare(a)

	manager := "all-1g.10gb"
	h.labelNode(&manager)
	if err := h.plugin.drv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an empty pool and OwnershipConflict", func() (bool, error) {
		n, err := h.poolDeviceCount(ctx)
		if err != nil {
			return false, err
		}
		if n != 0 {
			return false, fmt.Errorf("%d devices published", n)
		}
		na, err := h.nodeAccelerator()
		if err != nil {
			return false, err
		}
		if !meta.IsStatusConditionTrue(na.Status.Conditions, slicerv1alpha1.ConditionOwnershipConflict) {
			return false, fmt.Errorf("conditions %+v", na.Status.Conditions)
		}
		return true, nil
	})

	b := h.allocate("b", "gpu-1-3g-40gb-at-4")
	r := h.prepareResult(b)
	if !strings.Contains(r.Error, slicerv1alpha1.LabelNVIDIAMIGConfig) {
		t.Fatalf("prepare on a node another MIG manager owns: %q", r.Error)
	}
	for op, want := range map[[2]string]float64{{"prepare", "success"}: 1, {"prepare", "error"}: 1} {
		if got := testutil.ToFloat64(h.plugin.metrics.DRARequests.WithLabelValues(op[0], op[1])); got != want {
			t.Fatalf("slicer_agent_dra_claims_total%v = %v, want %v", op, got, want)
		}
	}
	if inst := h.instances(); len(inst) != 1 || inst["gpu-0-1g-10gb-at-0"] == "" {
		t.Fatalf("instances while another manager owns the node: %v", inst)
	}
	h.unprepare(a)
	if inst := h.instances(); len(inst) != 1 {
		t.Fatalf("unprepare destroyed an instance while another manager owns the node: %v", inst)
	}
	if _, ok, err := h.cdi.ReadClaim(string(a.UID)); err != nil || ok {
		t.Fatalf("the released claim's CDI spec: present %v, %v", ok, err)
	}

	h.labelNode(nil)
	if err := h.plugin.drv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool back", func() (bool, error) {
		n, err := h.poolDeviceCount(ctx)
		if n == 0 && err == nil {
			err = errors.New("no devices yet")
		}
		return n > 0, err
	})
	h.prepare(b)
	if inst := h.instances(); inst["gpu-1-3g-40gb-at-4"] == "" {
		t.Fatalf("instances after the label went: %v", inst)
	}
}

// advertise sets the node's capacity and allocatable of resource to q, as the kubelet does for
// a device plugin's resource.
func (h *harness) advertise(resource, q string) {
	h.t.Helper()
	patch := fmt.Sprintf(`{"status":{"capacity":{%[1]q:%[2]q},"allocatable":{%[1]q:%[2]q}}}`, resource, q)
	if _, err := h.cs.CoreV1().Nodes().Patch(context.Background(), nodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		h.t.Fatal(err)
	}
}

// While another device plugin advertises nvidia.com/mig-* on the node, the DRA frontend refuses
// it as the device-plugin frontend does (migapi.NodeForeign): an empty pool, no prepare,
// OwnershipConflict with reason ForeignDevicePlugin and the fix; once the resource is at zero,
// claims are prepared again.
func TestForeignDevicePluginOwnsTheNode(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	waitFor(t, "the node's pool", func() (bool, error) {
		n, err := h.poolDeviceCount(ctx)
		return n > 0, err
	})
	h.advertise("nvidia.com/mig-1g.10gb", "7")
	if err := h.plugin.drv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an empty pool and OwnershipConflict for another device plugin", func() (bool, error) {
		n, err := h.poolDeviceCount(ctx)
		if err != nil || n != 0 {
			return false, err
		}
		na, err := h.nodeAccelerator()
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(na.Status.Conditions, slicerv1alpha1.ConditionOwnershipConflict)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == slicerv1alpha1.ReasonForeignDevicePlugin &&
			strings.Contains(c.Message, slicerv1alpha1.LabelGPUOperatorDeployDevicePlugin+"=false"), nil
	})
	a := h.allocate("a", "gpu-0-1g-10gb-at-0")
	if r := h.prepareResult(a); !strings.Contains(r.Error, "nvidia.com/mig-1g.10gb") {
		t.Fatalf("prepare while another device plugin advertises nvidia.com/mig-1g.10gb: %q", r.Error)
	}
	if inst := h.instances(); len(inst) != 0 {
		t.Fatalf("instances while another device plugin serves the node: %v", inst)
	}

	h.advertise("nvidia.com/mig-1g.10gb", "0")
	if err := h.plugin.drv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool back", func() (bool, error) {
		n, err := h.poolDeviceCount(ctx)
		return n > 0, err
	})
	h.prepare(a)
	if inst := h.instances(); inst["gpu-0-1g-10gb-at-0"] == "" {
		t.Fatalf("instances once the other plugin is gone: %v", inst)
	}
}
