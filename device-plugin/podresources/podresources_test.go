package podresources_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/slicer-operator/slicer/device-plugin/podresources"
)

type fakeLister struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	resp *podresourcesapi.ListPodResourcesResponse
}

func (f *fakeLister) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return f.resp, nil
}

func (f *fakeLister) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	return &podresourcesapi.AllocatableResourcesResponse{Devices: []*podresourcesapi.ContainerDevices{
		{ResourceName: "slicer.dev/mig-1g.10gb", DeviceIds: []string{"GPU-1_1g.10gb_0", "GPU-1_1g.10gb_1"}},
		{ResourceName: "slicer.dev/mig-3g.40gb", DeviceIds: []string{"GPU-2_3g.40gb_4"}},
		{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-x"}},
		{ResourceName: "nvidia.com/mig-1g.10gb", DeviceIds: []string{"MIG-y"}},
	}}, nil
}

func TestDeviceUsage(t *testing.T) {
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, &fakeLister{resp: &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Name: "p1", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "c", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: "slicer.dev/mig-1g.10gb", DeviceIds: []string{"MIG-1"}},
			{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-x"}},
			{ResourceName: "example.com/fpga", DeviceIds: []string{"fpga-0"}},
		}}}},
		{Name: "p2", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "c", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: "slicer.dev/mig-3g.40gb", DeviceIds: []string{"MIG-3", "MIG-4"}},
		}}}},
		{Name: "admitting", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "c"}}},
	}}})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	got, err := (&podresources.Client{Socket: sock}).DeviceUsage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The served resources only: the slices, and whole GPUs by UUID.
	want := map[string]string{"MIG-1": "ns/p1", "GPU-x": "ns/p1", "MIG-3": "ns/p2", "MIG-4": "ns/p2"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	pods, err := (&podresources.Client{Socket: sock}).PodDevices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantPods := map[string]map[string][]string{
		"ns/p1":        {"slicer.dev/mig-1g.10gb": {"MIG-1"}, "nvidia.com/gpu": {"GPU-x"}},
		"ns/p2":        {"slicer.dev/mig-3g.40gb": {"MIG-3", "MIG-4"}},
		"ns/admitting": {},
	}
	if d := cmp.Diff(wantPods, pods); d != "" {
		t.Errorf("PodDevices (-want +got):\n%s", d)
	}
	allocatable, err := (&podresources.Client{Socket: sock}).AllocatableDeviceIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantAllocatable := map[string]bool{"GPU-1_1g.10gb_0": true, "GPU-1_1g.10gb_1": true, "GPU-2_3g.40gb_4": true, "GPU-x": true}
	if d := cmp.Diff(wantAllocatable, allocatable); d != "" {
		t.Errorf("AllocatableDeviceIDs, the served ones only (-want +got):\n%s", d)
	}
	if _, err := (&podresources.Client{Socket: filepath.Join(dir, "missing.sock")}).AllocatableDeviceIDs(context.Background()); err == nil {
		t.Error("a missing socket gave no error")
	}
	if _, err := (&podresources.Client{Socket: filepath.Join(dir, "missing.sock")}).PodDevices(context.Background()); err == nil {
		t.Error("a missing socket gave no error")
	}
	if _, err := (&podresources.Client{Socket: filepath.Join(dir, "missing.sock")}).DeviceUsage(context.Background()); err == nil {
		t.Error("a missing socket gave no error")
	}
}
