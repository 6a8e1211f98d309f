package plugin_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/plugin"
	"github.com/slicer-operator/slicer/internal/mig"
)

// fakeKubelet is the kubelet's Registration service on <dir>/kubelet.sock; on
// every registration it opens ListAndWatch to the plugin like the kubelet does.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir  string
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest
	// lists receives every ListAndWatch response: resource → device ID → health.
	lists chan map[string]map[string]string
	mu    sync.Mutex
	conns []*grpc.ClientConn
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{dir: dir, regs: make(chan *pluginapi.RegisterRequest, 16), lists: make(chan map[string]map[string]string, 64)}
	lis, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(lis) }()
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, status.Errorf(codes.InvalidArgument, "version %q", r.Version)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.conns = append(k.conns, conn)
	k.mu.Unlock()
	k.regs <- r
	go func() {
		stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(context.Background(), &pluginapi.Empty{})
		if err != nil {
			return
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			devs := map[string]string{}
			for _, d := range resp.Devices {
				devs[d.ID] = d.Health
			}
			k.lists <- map[string]map[string]string{r.ResourceName: devs}
		}
	}()
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) client(t *testing.T, resource string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, plugin.SocketName(resource)), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// restart is a kubelet restart: it stops, deletes every socket in the
// directory (as the kubelet does at start) and serves a new kubelet.sock.
func (k *fakeKubelet) restart(t *testing.T) *fakeKubelet {
	t.Helper()
	k.stop()
	entries, _ := os.ReadDir(k.dir)
	for _, e := range entries {
		if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	return startKubelet(t, k.dir)
}

func (k *fakeKubelet) stop() {
	k.srv.Stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
}

const wait = 30 * time.Second

// waitList waits for a ListAndWatch response for resource equal to want.
func waitList(t *testing.T, k *fakeKubelet, resource string, want map[string]string) {
	t.Helper()
	deadline := time.After(wait)
	var last map[string]string
	for {
		select {
		case l := <-k.lists:
			if got, ok := l[resource]; ok {
				last = got
				if cmp.Diff(want, got) == "" {
					return
				}
			}
		case <-deadline:
			t.Fatalf("no ListAndWatch update for %s with %v (last %v)", resource, want, last)
		}
	}
}

func waitReg(t *testing.T, k *fakeKubelet) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-k.regs:
		return r
	case <-time.After(wait):
		t.Fatal("the plugin did not register")
		return nil
	}
}

// shortDir is a temporary directory with a short path: unix socket paths are
// limited to 108 bytes, too few for t.TempDir().
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// runManager runs m until the test ends, then stops it (before the cleanups
// registered earlier, such as the fake kubelet's) and checks its error. The
// context it returns lives as long as the manager.
func runManager(t *testing.T, m *plugin.Manager) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ctx
}

func TestDevicePluginWithFakeKubelet(t *testing.T) {
	dir := shortDir(t)
	k := startKubelet(t, dir)
	t.Cleanup(func() { k.stop() }) // k is replaced when the test restarts the kubelet
	regs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "r"}, []string{"result"})
	allocs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a"}, []string{"result"})
	allocated := make(chan struct{}, 8)
	res := mig.ResourceName("1g.10gb+me")
	cdiW := &cdi.Writer{Dir: t.TempDir()}
	m := plugin.NewManager(plugin.Options{Dir: dir, Resources: []string{res}, Registrations: regs, Allocates: allocs,
		CheckInterval: 50 * time.Millisecond, OnAllocate: func() { allocated <- struct{}{} }, CDI: cdiW}, testr.New(t))
	ctx := runManager(t, m)

	r := waitReg(t, k)
	if r.ResourceName != "slicer.dev/mig-1g.10gb.me" || r.Endpoint != "slicer.dev-mig-1g.10gb.me.sock" {
		t.Errorf("registration %+v", r)
	}
	waitList(t, k, res, map[string]string{})

	dev := plugin.Device{ID: "MIG-1", MIGUUID: "MIG-u1", Resource: res, CDIName: "slicer.dev/mig=MIG-1", Healthy: true}
	m.SetDevices([]plugin.Device{dev})
	waitList(t, k, res, map[string]string{"MIG-1": pluginapi.Healthy})
	dev.Healthy = false
	m.SetDevices([]plugin.Device{dev})
	waitList(t, k, res, map[string]string{"MIG-1": pluginapi.Unhealthy})
	dev.Healthy = true
	m.SetDevices([]plugin.Device{dev})
	waitList(t, k, res, map[string]string{"MIG-1": pluginapi.Healthy})

	c := k.client(t, res)
	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"MIG-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// No MIG UUID in what the kubelet checkpoints: the device's own spec names it.
	want := &pluginapi.ContainerAllocateResponse{CdiDevices: []*pluginapi.CDIDevice{{Name: "slicer.dev/mig=MIG-1"}}}
	if d := cmp.Diff(want.String(), resp.ContainerResponses[0].String()); d != "" {
		t.Errorf("Allocate (-want +got):\n%s", d)
	}
	<-allocated
	// Two slices in one container: both CDI devices, and their set's, whose spec lists
	// both MIG devices.
	dev2 := plugin.Device{ID: "MIG-2", MIGUUID: "MIG-u2", Resource: res, CDIName: "slicer.dev/mig=MIG-2", Healthy: true}
	m.SetDevices([]plugin.Device{dev, dev2})
	waitList(t, k, res, map[string]string{"MIG-1": pluginapi.Healthy, "MIG-2": pluginapi.Healthy})
	resp, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"MIG-2", "MIG-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	set := cdi.SetName([]string{"MIG-1", "MIG-2"})
	want = &pluginapi.ContainerAllocateResponse{
		CdiDevices: []*pluginapi.CDIDevice{{Name: "slicer.dev/mig=MIG-2"}, {Name: "slicer.dev/mig=MIG-1"}, {Name: cdi.QualifiedName(set)}}}
	if d := cmp.Diff(want.String(), resp.ContainerResponses[0].String()); d != "" {
		t.Errorf("Allocate of two devices (-want +got):\n%s", d)
	}
	<-allocated
	if got := setEnv(t, cdiW, set); got != "NVIDIA_VISIBLE_DEVICES=MIG-u1,MIG-u2" {
		t.Errorf("set spec env %q", got)
	}
	// Reboot: the instances are recreated with new MIG UUIDs at their slots (same IDs). The
	// kubelet starts the container with its checkpointed answer after PreStartContainer,
	// which rewrites the set's spec.
	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil || !opts.PreStartRequired {
		t.Errorf("options %v (%v): PreStartContainer must be required", opts, err)
	}
	dev.MIGUUID, dev2.MIGUUID = "MIG-v1", "MIG-v2"
	m.SetDevices([]plugin.Device{dev, dev2})
	if _, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"MIG-2", "MIG-1"}}); err != nil {
		t.Fatalf("PreStartContainer: %v", err)
	}
	if got := setEnv(t, cdiW, set); got != "NVIDIA_VISIBLE_DEVICES=MIG-v1,MIG-v2" {
		t.Errorf("set spec env after PreStartContainer %q", got)
	}
	// A container of a pod admitted when device IDs were MIG UUIDs starts again.
	if _, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"MIG-v1"}}); err != nil {
		t.Errorf("PreStartContainer by MIG UUID: %v", err)
	}
	// A device whose instance is not (yet) recreated: the container does not start.
	m.SetDevices([]plugin.Device{dev})
	waitList(t, k, res, map[string]string{"MIG-1": pluginapi.Healthy})
	if _, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"MIG-2", "MIG-1"}}); status.Code(err) != codes.NotFound {
		t.Errorf("PreStartContainer with a device not realized: %v, want NotFound", err)
	}
	_, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"MIG-404"}}}})
	if status.Code(err) != codes.NotFound {
		t.Errorf("Allocate of an unknown device: %v, want NotFound", err)
	}
	if got := testutil.ToFloat64(allocs.WithLabelValues("unknown_device")); got != 1 {
		t.Errorf("unknown_device allocations = %v", got)
	}

	// A new profile appears: it is served and registered too.
	res2 := mig.ResourceName("3g.40gb")
	m.SetDevices([]plugin.Device{dev, {ID: "MIG-3", Resource: res2, CDIName: "slicer.dev/mig=MIG-3", Healthy: true}})
	if r := waitReg(t, k); r.ResourceName != res2 {
		t.Errorf("registered %s, want %s", r.ResourceName, res2)
	}
	waitList(t, k, res2, map[string]string{"MIG-3": pluginapi.Healthy})

	// Both registrations must have been answered before the kubelet goes away
	// (the fake kubelet records a request before it replies).
	waitRegistrations(t, regs, 2)

	// Kubelet restart: sockets wiped; the plugin re-registers and re-sends its devices.
	k = k.restart(t)
	got := map[string]bool{waitReg(t, k).ResourceName: true, waitReg(t, k).ResourceName: true}
	if !got[res] || !got[res2] {
		t.Errorf("re-registered %v", got)
	}
	waitList(t, k, res, map[string]string{"MIG-1": pluginapi.Healthy})
	waitRegistrations(t, regs, 4)
	// Devices go away: an empty list is sent.
	m.SetDevices(nil)
	waitList(t, k, res, map[string]string{})
}

// setEnv is the environment a set's spec gives, read back with the CDI library.
func setEnv(t *testing.T, w *cdi.Writer, set string) string {
	t.Helper()
	spec, err := cdiapi.ReadSpec(w.Path(set), 0)
	if err != nil {
		t.Fatal(err)
	}
	d := spec.GetDevice(set)
	if d == nil {
		t.Fatalf("spec of %s has no device %s", w.Path(set), set)
	}
	return strings.Join(d.ContainerEdits.Env, " ")
}

// waitRegistrations polls until the success counter reaches want: it moves
// just after the kubelet answered.
func waitRegistrations(t *testing.T, regs *prometheus.CounterVec, want float64) {
	t.Helper()
	for deadline := time.Now().Add(wait); testutil.ToFloat64(regs.WithLabelValues("success")) != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("successful registrations = %v, want %v", testutil.ToFloat64(regs.WithLabelValues("success")), want)
		}
	}
}

func TestResourcesFor(t *testing.T) {
	got := plugin.ResourcesFor([]mig.Model{mig.A30_24GB})
	want := []string{"slicer.dev/mig-1g.6gb", "slicer.dev/mig-1g.6gb.me", "slicer.dev/mig-2g.12gb", "slicer.dev/mig-2g.12gb.me", "slicer.dev/mig-4g.24gb"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// preferFunc is a Preferrer from a function; it records the resource asked.
type preferFunc func(resource string, available, mustInclude []string, size int) []string

func (f preferFunc) Preferred(_ context.Context, resource string, available, mustInclude []string, size int) []string {
	return f(resource, available, mustInclude, size)
}

func TestGetPreferredAllocation(t *testing.T) {
	res := mig.ResourceName("1g.10gb")
	tests := []struct {
		name      string
		preferrer plugin.Preferrer
		req       *pluginapi.ContainerPreferredAllocationRequest
		wantOpt   bool
		want      []string
	}{
		{name: "no preferrer: not offered, empty answer", req: &pluginapi.ContainerPreferredAllocationRequest{
			AvailableDeviceIDs: []string{"MIG-a", "MIG-b"}, AllocationSize: 1}},
		{name: "the preferrer's choice is returned", wantOpt: true, want: []string{"MIG-b"},
			preferrer: preferFunc(func(r string, available, _ []string, size int) []string {
				if r != res || size != 1 || len(available) != 2 {
					return nil
				}
				return []string{"MIG-b"}
			}),
			req: &pluginapi.ContainerPreferredAllocationRequest{AvailableDeviceIDs: []string{"MIG-a", "MIG-b"}, AllocationSize: 1}},
		{name: "unknown and duplicate IDs are dropped, the answer capped at size", wantOpt: true, want: []string{"MIG-b", "MIG-a"},
			preferrer: preferFunc(func(string, []string, []string, int) []string {
				return []string{"MIG-x", "MIG-b", "MIG-b", "MIG-a", "MIG-c"}
			}),
			req: &pluginapi.ContainerPreferredAllocationRequest{AvailableDeviceIDs: []string{"MIG-a", "MIG-b", "MIG-c"}, AllocationSize: 2}},
		{name: "must-include IDs are always part of the answer", wantOpt: true, want: []string{"MIG-m", "MIG-b"},
			preferrer: preferFunc(func(string, []string, []string, int) []string { return []string{"MIG-b", "MIG-c"} }),
			req: &pluginapi.ContainerPreferredAllocationRequest{AvailableDeviceIDs: []string{"MIG-m", "MIG-b", "MIG-c"},
				MustIncludeDeviceIDs: []string{"MIG-m"}, AllocationSize: 2}},
		{name: "no preference: empty answer, the kubelet chooses", wantOpt: true,
			preferrer: preferFunc(func(string, []string, []string, int) []string { return nil }),
			req:       &pluginapi.ContainerPreferredAllocationRequest{AvailableDeviceIDs: []string{"MIG-a"}, AllocationSize: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			k := startKubelet(t, dir)
			t.Cleanup(k.stop)
			m := plugin.NewManager(plugin.Options{Dir: dir, Resources: []string{res}, CheckInterval: 50 * time.Millisecond,
				Preferrer: tc.preferrer}, testr.New(t))
			ctx := runManager(t, m)
			r := waitReg(t, k)
			if got := r.GetOptions().GetGetPreferredAllocationAvailable(); got != tc.wantOpt {
				t.Errorf("registration offers GetPreferredAllocation = %v, want %v", got, tc.wantOpt)
			}
			c := k.client(t, res)
			opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			if opts.GetPreferredAllocationAvailable != tc.wantOpt {
				t.Errorf("GetDevicePluginOptions offers GetPreferredAllocation = %v, want %v", opts.GetPreferredAllocationAvailable, tc.wantOpt)
			}
			resp, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{tc.req}})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.ContainerResponses) != 1 {
				t.Fatalf("%d container responses, want 1", len(resp.ContainerResponses))
			}
			if d := cmp.Diff(tc.want, resp.ContainerResponses[0].DeviceIDs); d != "" {
				t.Errorf("preferred (-want +got):\n%s", d)
			}
		})
	}
}
