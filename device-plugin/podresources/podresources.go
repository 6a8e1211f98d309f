// Package podresources asks the kubelet's PodResources API which MIG device
// each pod really got: the kubelet may hand a realized slice to a different
// pending pod of the same profile, and the agent must learn the truth. It reads
// the resources the agent serves (Served): the MIG slices and whole GPUs.
package podresources

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// Served reports whether the device-plugin agent serves a resource: a MIG profile's
// (slicer.dev/mig-*) or whole GPUs (nvidia.com/gpu, agent/whole.go). A whole GPU's device ID
// is its UUID.
func Served(resource string) bool {
	return strings.HasPrefix(resource, mig.ResourcePrefix) || resource == migapi.NVIDIAGPUResource
}

// DefaultSocket is the kubelet's PodResources socket.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Client lists device assignments.
type Client struct {
	Socket  string
	Timeout time.Duration
}

// PodKey is how a pod is named in the usage map: "namespace/name" (the
// PodResources API carries no pod UID).
func PodKey(namespace, name string) string { return namespace + "/" + name }

// DeviceUsage maps every served device ID (Served) the kubelet assigned to the
// "namespace/name" of its pod.
func (c *Client) DeviceUsage(ctx context.Context) (map[string]string, error) {
	resp, err := c.list(ctx)
	if err != nil {
		return nil, err
	}
	return Usage(resp), nil
}

// PodDevices maps every pod the kubelet lists to the served devices it
// holds, by resource: "namespace/name" → resource → device IDs. A pod the
// kubelet is admitting is listed with no devices yet (the kubelet adds a pod
// to its pod manager before admitting it, and List reports the pod manager's
// active pods).
func (c *Client) PodDevices(ctx context.Context) (map[string]map[string][]string, error) {
	resp, err := c.list(ctx)
	if err != nil {
		return nil, err
	}
	return PodDevicesOf(resp), nil
}

func (c *Client) list(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	var resp *podresourcesapi.ListPodResourcesResponse
	err := c.call(ctx, func(ctx context.Context, pr podresourcesapi.PodResourcesListerClient) (err error) {
		resp, err = pr.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
		if err != nil {
			return fmt.Errorf("pod resources list: %w", err)
		}
		return nil
	})
	return resp, err
}

// call runs f with a client of the kubelet's PodResources socket, within the timeout.
func (c *Client) call(ctx context.Context, f func(context.Context, podresourcesapi.PodResourcesListerClient) error) error {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("pod resources %s: %w", c.Socket, err)
	}
	defer conn.Close()
	return f(ctx, podresourcesapi.NewPodResourcesListerClient(conn))
}

// PodDevicesOf extracts every pod and its served devices from a List
// response (see PodDevices).
func PodDevicesOf(resp *podresourcesapi.ListPodResourcesResponse) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for _, p := range resp.GetPodResources() {
		key := PodKey(p.GetNamespace(), p.GetName())
		devs := out[key]
		if devs == nil {
			devs = map[string][]string{}
			out[key] = devs
		}
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if Served(d.GetResourceName()) {
					devs[d.GetResourceName()] = append(devs[d.GetResourceName()], d.GetDeviceIds()...)
				}
			}
		}
	}
	return out
}

// AllocatableDeviceIDs lists the served device IDs the kubelet holds as allocatable
// (GetAllocatableResources): those it has received from the device plugin's ListAndWatch.
// The kubelet updates this list and the devices it admits pods with in one step, so a device
// listed here can be handed to a pod being admitted now.
func (c *Client) AllocatableDeviceIDs(ctx context.Context) (map[string]bool, error) {
	var resp *podresourcesapi.AllocatableResourcesResponse
	err := c.call(ctx, func(ctx context.Context, pr podresourcesapi.PodResourcesListerClient) (err error) {
		resp, err = pr.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
		if err != nil {
			return fmt.Errorf("pod resources allocatable: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range resp.GetDevices() {
		if Served(d.GetResourceName()) {
			for _, id := range d.GetDeviceIds() {
				out[id] = true
			}
		}
	}
	return out, nil
}

// Usage extracts the served device assignments from a List response.
func Usage(resp *podresourcesapi.ListPodResourcesResponse) map[string]string {
	out := map[string]string{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if !Served(d.GetResourceName()) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					out[id] = PodKey(p.GetNamespace(), p.GetName())
				}
			}
		}
	}
	return out
}
