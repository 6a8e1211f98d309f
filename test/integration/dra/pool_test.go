// Package dra checks Slicer's DRA objects (internal/mig/migdra) against a real kube-apiserver:
// its validation accepts them with no field dropped, its limits are the ones migdra keeps,
// and an apiserver with partitionable devices off is detected.
package dra

import (
	"context"
	"fmt"
	"os"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/test/framework"
)

func start(t *testing.T, args map[string]string) kubernetes.Interface {
	t.Helper()
	cs, _ := startEnv(t, args)
	return cs
}

// startEnv starts a control plane with Slicer's CRDs and returns a clientset and the
// environment (its controller-runtime client knows Slicer's types).
func startEnv(t *testing.T, args map[string]string) (kubernetes.Interface, *framework.Env) {
	t.Helper()
	env, err := framework.Start(framework.Options{WithoutExternalCRDs: true, APIServerArgs: args})
	if err != nil {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			t.Skipf("no control plane: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs, env
}

func eightH100s() []migdra.GPU {
	h100, _ := mig.ParseModel("H100-80GB")
	var gpus []migdra.GPU
	for i := range 8 {
		gpus = append(gpus, migdra.GPU{Index: i, UUID: fmt.Sprintf("GPU-%08d", i), State: mig.EmptyGPU(h100), MIGEnabled: true, Healthy: true})
	}
	return gpus
}

// The pool of an 8 × H100 node and the classes of every H100 profile are accepted as they are:
// every slice reads back with its counters, every device with its counter consumption, every
// class with its extended resource name.
func TestPoolAndClassesAccepted(t *testing.T) {
	cs := start(t, nil)
	ctx := context.Background()
	pool, err := migdra.Pool(eightH100s(), mig.PreferredOrder)
	if err != nil {
		t.Fatal(err)
	}
	for i, sl := range pool.Slices {
		obj := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-a-%02d", i)},
			Spec: resourceapi.ResourceSliceSpec{Driver: migdra.DriverName, NodeName: ptr.To("node-a"),
				Pool:           resourceapi.ResourcePool{Name: "node-a", Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				Devices:        sl.Devices,
				SharedCounters: sl.SharedCounters},
		}
		got, err := cs.ResourceV1().ResourceSlices().Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("slice %d: %v", i, err)
		}
		if len(got.Spec.Devices) != len(sl.Devices) || len(got.Spec.SharedCounters) != len(sl.SharedCounters) {
			t.Fatalf("slice %d read back with %d devices, %d counter sets; sent %d, %d", i,
				len(got.Spec.Devices), len(got.Spec.SharedCounters), len(sl.Devices), len(sl.SharedCounters))
		}
		for j, d := range got.Spec.Devices {
			if len(d.ConsumesCounters) != 1 || len(d.ConsumesCounters[0].Counters) != len(sl.Devices[j].ConsumesCounters[0].Counters) {
				t.Fatalf("device %s lost its counter consumption: %+v", d.Name, d.ConsumesCounters)
			}
		}
	}
	h100, _ := mig.ParseModel("H100-80GB")
	var names []string
	for _, p := range h100.Profiles() {
		names = append(names, p.Name)
	}
	classes, err := migdra.DeviceClasses(names, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		got, err := cs.ResourceV1().DeviceClasses().Create(ctx, &c, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("class %s: %v", c.Name, err)
		}
		if got.Spec.ExtendedResourceName == nil || *got.Spec.ExtendedResourceName != *c.Spec.ExtendedResourceName {
			t.Fatalf("class %s lost its extended resource name", c.Name)
		}
	}
}

// The limit migdra splits at is the apiserver's: one device more than
// ResourceSliceMaxDevicesWithAdvancedFeatures in a slice is refused.
func TestSliceLimitIsTheAPIServers(t *testing.T) {
	cs := start(t, nil)
	h100, _ := mig.ParseModel("H100-80GB")
	var gpus []migdra.GPU
	for i := range 16 {
		gpus = append(gpus, migdra.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), State: mig.EmptyGPU(h100), MIGEnabled: true, Healthy: true})
	}
	pool, err := migdra.Pool(gpus, mig.NameOrder)
	if err != nil {
		t.Fatal(err)
	}
	var all []resourceapi.Device
	for _, sl := range pool.Slices {
		all = append(all, sl.Devices...)
	}
	limit := resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	for _, n := range []int{limit, limit + 1} {
		_, err := cs.ResourceV1().ResourceSlices().Create(context.Background(), &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "limit-"},
			Spec: resourceapi.ResourceSliceSpec{Driver: migdra.DriverName, NodeName: ptr.To("node-b"),
				Pool: resourceapi.ResourcePool{Name: fmt.Sprintf("node-b-%d", n), ResourceSliceCount: 1}, Devices: all[:n]},
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if n == limit && err != nil {
			t.Fatalf("%d devices refused: %v", n, err)
		}
		if n > limit && !apierrors.IsInvalid(err) {
			t.Fatalf("%d devices: want Invalid, got %v", n, err)
		}
	}
}

// The partitionable-devices probe (a server-side dry run) tells an apiserver that serves
// partitionable devices from one that has them off and silently drops the fields.
func TestPartitionableProbe(t *testing.T) {
	for _, tc := range []struct {
		gates string
		want  bool
	}{{"", true}, {"DRAPartitionableDevices=false", false}} {
		t.Run(fmt.Sprintf("gates=%q", tc.gates), func(t *testing.T) {
			args := map[string]string{}
			if tc.gates != "" {
				args["feature-gates"] = tc.gates
			}
			cs := start(t, args)
			got, err := cs.ResourceV1().ResourceSlices().Create(context.Background(), migdra.PartitionableProbe("node-c"),
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatal(err)
			}
			if served := migdra.PartitionableServed(got); served != tc.want {
				t.Fatalf("PartitionableServed = %v, want %v", served, tc.want)
			}
		})
	}
}
