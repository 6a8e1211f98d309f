package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/internal/mig"
)

// DefaultDir is the kubelet's device plugin directory.
const DefaultDir = pluginapi.DevicePluginPath

// Options configure the device plugin manager.
type Options struct {
	// Dir holds kubelet.sock and the plugin sockets.
	Dir string
	// Resources are served from the start (with no devices until realized).
	Resources []string
	// Registrations and Allocates count kubelet registrations and Allocate
	// calls by result (may be nil).
	Registrations *prometheus.CounterVec
	Allocates     *prometheus.CounterVec
	// OnAllocate is called after a successful Allocate (e.g. to let the agent
	// learn from the PodResources API which device the pod got).
	OnAllocate func()
	// CheckInterval is how often sockets are checked for a kubelet restart.
	CheckInterval time.Duration
	// Preferrer, when set, answers the kubelet's GetPreferredAllocation (the
	// plugins then offer it in their options); nil: the kubelet chooses.
	Preferrer Preferrer
	// CDI writes the set specs of containers that receive several devices of a resource
	// (cdi/set.go); nil: such a container gets only its devices' own specs, and
	// EnvVisibleDevices names the last of them.
	CDI *cdi.Writer
}

// Preferrer tells the kubelet which devices of a resource to hand to the
// container it is admitting. The kubelet does not say which pod that is.
type Preferrer interface {
	// Preferred returns the device IDs to prefer, at most size of them, from
	// available; it must include mustInclude. Nil leaves the choice to the
	// kubelet. It must not block for long: the kubelet waits for the answer
	// while admitting the pod.
	Preferred(ctx context.Context, resource string, available, mustInclude []string, size int) []string
}

// Manager serves one device plugin per resource and keeps them registered.
type Manager struct {
	opts Options
	log  logr.Logger

	mu      sync.Mutex
	devices map[string][]Device // by resource
	servers map[string]*server
}

// NewManager returns a manager; Run starts it.
func NewManager(opts Options, log logr.Logger) *Manager {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = time.Second
	}
	return &Manager{opts: opts, log: log, devices: map[string][]Device{}, servers: map[string]*server{}}
}

// SocketName is the plugin socket of a resource (slicer.dev/mig-1g.10gb →
// slicer.dev-mig-1g.10gb.sock).
func SocketName(resource string) string {
	return strings.ReplaceAll(resource, "/", "-") + ".sock"
}

// SetDevices replaces the advertised devices; every resource whose list
// changed gets a ListAndWatch update.
func (m *Manager) SetDevices(devs []Device) {
	by := map[string][]Device{}
	for _, d := range devs {
		by[d.Resource] = append(by[d.Resource], d)
	}
	for _, l := range by {
		sort.Slice(l, func(i, j int) bool { return l[i].ID < l[j].ID })
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	resources := map[string]bool{}
	for r := range m.devices {
		resources[r] = true
	}
	for r := range by {
		resources[r] = true
	}
	for r := range resources {
		if equalDevices(m.devices[r], by[r]) {
			continue
		}
		m.devices[r] = by[r]
		if s := m.servers[r]; s != nil {
			s.notify()
		} // a new resource is served by Run's next check

	}
}

func equalDevices(a, b []Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// lookup finds an advertised device by its ID or, for a container of a pod the kubelet
// admitted when the agent named devices by MIG UUID, by its MIG UUID (the kubelet asks
// PreStartContainer with the IDs it checkpointed then; the agent keeps a spec under that name).
func (m *Manager) lookup(resource, id string) (Device, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.devices[resource] {
		if d.ID == id {
			return d, true
		}
	}
	for _, d := range m.devices[resource] {
		if d.MIGUUID != "" && d.MIGUUID == id {
			return d, true
		}
	}
	return Device{}, false
}

func (m *Manager) list(resource string) []*pluginapi.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*pluginapi.Device, 0, len(m.devices[resource]))
	for _, d := range m.devices[resource] {
		h := pluginapi.Healthy
		if !d.Healthy {
			h = pluginapi.Unhealthy
		}
		out = append(out, &pluginapi.Device{ID: d.ID, Health: h})
	}
	return out
}

// Run serves and registers every resource until ctx ends, re-registering
// when the kubelet restarts (its restart deletes the plugin sockets).
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	for _, r := range m.opts.Resources {
		if _, ok := m.devices[r]; !ok {
			m.devices[r] = nil
		}
	}
	m.mu.Unlock()
	t := time.NewTicker(m.opts.CheckInterval)
	defer t.Stop()
	for {
		m.check(ctx)
		select {
		case <-ctx.Done():
			m.mu.Lock()
			for _, s := range m.servers {
				s.stop()
			}
			m.mu.Unlock()
			return nil
		case <-t.C:
		}
	}
}

// check (re)starts every resource's server that is missing, unregistered or
// whose socket the kubelet removed.
func (m *Manager) check(ctx context.Context) {
	m.mu.Lock()
	var todo []string
	for r := range m.devices {
		if s := m.servers[r]; s == nil || !s.healthy() {
			todo = append(todo, r)
		}
	}
	m.mu.Unlock()
	sort.Strings(todo)
	for _, r := range todo {
		m.mu.Lock()
		old := m.servers[r]
		m.mu.Unlock()
		if old != nil {
			m.log.Info("device plugin socket gone or not registered; restarting", "resource", r)
			old.stop()
		}
		s := &server{m: m, resource: r, socket: filepath.Join(m.opts.Dir, SocketName(r)), updates: map[chan struct{}]bool{}}
		m.mu.Lock()
		m.servers[r] = s
		m.mu.Unlock()
		if err := s.start(); err != nil {
			m.log.Error(err, "device plugin start failed", "resource", r)
			continue
		}
		if err := s.register(ctx); err != nil {
			m.count(m.opts.Registrations, "error")
			m.log.Error(err, "device plugin registration failed", "resource", r)
			continue
		}
		m.count(m.opts.Registrations, "success")
		m.log.Info("device plugin registered", "resource", r, "socket", s.socket)
	}
}

func (m *Manager) count(c *prometheus.CounterVec, result string) {
	if c != nil {
		c.WithLabelValues(result).Inc()
	}
}

// server is one resource's gRPC device plugin.
type server struct {
	pluginapi.UnimplementedDevicePluginServer
	m        *Manager
	resource string
	socket   string

	mu         sync.Mutex
	grpc       *grpc.Server
	registered bool
	updates    map[chan struct{}]bool
}

func (s *server) start() error {
	if err := os.MkdirAll(filepath.Dir(s.socket), 0o755); err != nil {
		return fmt.Errorf("device plugin dir: %w", err)
	}
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove old socket: %w", err)
	}
	lis, err := net.Listen("unix", s.socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.socket, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s)
	s.mu.Lock()
	s.grpc = g
	s.mu.Unlock()
	go func() {
		if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.m.log.Error(err, "device plugin server stopped", "resource", s.resource)
		}
	}()
	return nil
}

func (s *server) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(filepath.Dir(s.socket), filepath.Base(pluginapi.KubeletSocket)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet: %w", err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(s.socket), ResourceName: s.resource,
		Options: s.m.options(),
	})
	if err != nil {
		return fmt.Errorf("register %s with the kubelet: %w", s.resource, err)
	}
	s.mu.Lock()
	s.registered = true
	s.mu.Unlock()
	return nil
}

// healthy reports whether the server is registered and its socket exists.
func (s *server) healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpc == nil || !s.registered {
		return false
	}
	_, err := os.Stat(s.socket)
	return err == nil
}

func (s *server) stop() {
	s.mu.Lock()
	g := s.grpc
	s.grpc, s.registered = nil, false
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

func (s *server) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.updates {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (m *Manager) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: m.opts.Preferrer != nil, PreStartRequired: true}
}

// GetDevicePluginOptions implements the device plugin API.
func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.m.options(), nil
}

// ListAndWatch sends the device list now and after every change.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.updates[ch] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.updates, ch)
		s.mu.Unlock()
	}()
	for {
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: s.m.list(s.resource)}); err != nil {
			return fmt.Errorf("ListAndWatch send for %s: %w", s.resource, err)
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-ch:
		}
	}
}

// Allocate answers with the CDI device of each requested slice, and for a container that
// receives several, their set device last (cdi/set.go). The answer names no MIG UUID: the
// kubelet checkpoints it and, after a reboot, starts the container with it again, while the
// instances are recreated with new MIG UUIDs. An unknown device ID is an error.
func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		devs, err := s.realized(cr.DevicesIds)
		if err != nil {
			s.m.count(s.m.opts.Allocates, "unknown_device")
			return nil, err
		}
		car := &pluginapi.ContainerAllocateResponse{}
		for _, d := range devs {
			car.CdiDevices = append(car.CdiDevices, &pluginapi.CDIDevice{Name: d.CDIName})
		}
		set, err := s.writeSet(devs)
		if err != nil {
			s.m.count(s.m.opts.Allocates, "error")
			return nil, err
		}
		if set != "" {
			car.CdiDevices = append(car.CdiDevices, &pluginapi.CDIDevice{Name: set})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	s.m.count(s.m.opts.Allocates, "success")
	if s.m.opts.OnAllocate != nil {
		s.m.opts.OnAllocate()
	}
	return resp, nil
}

// realized looks the device IDs up among the advertised (realized) devices.
func (s *server) realized(ids []string) ([]Device, error) {
	devs := make([]Device, 0, len(ids))
	for _, id := range ids {
		d, ok := s.m.lookup(s.resource, id)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "%s: device %q is not a realized slice on this node (after a reboot: its instance is not recreated at its placement)", s.resource, id)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// writeSet writes the set spec of a container's devices when there are several and returns
// its qualified name ("" for one device, or without a CDI writer).
func (s *server) writeSet(devs []Device) (string, error) {
	if len(devs) < 2 || s.m.opts.CDI == nil {
		return "", nil
	}
	ids := make([]string, 0, len(devs))
	uuids := make([]string, 0, len(devs))
	for _, d := range devs {
		ids, uuids = append(ids, d.ID), append(uuids, d.MIGUUID)
	}
	name, err := s.m.opts.CDI.WriteSet(ids, uuids)
	if err != nil {
		return "", status.Errorf(codes.Internal, "%s: %v", s.resource, err)
	}
	return name, nil
}

// GetPreferredAllocation asks the Preferrer which devices each container
// should get. It never fails: an error here would make the kubelet reject the
// pod, while an empty answer lets the kubelet choose by itself.
func (s *server) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		var ids []string
		if s.m.opts.Preferrer != nil {
			ids = sanitize(s.m.opts.Preferrer.Preferred(ctx, s.resource, cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize)),
				cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize))
		}
		s.m.log.V(1).Info("preferred allocation", "resource", s.resource, "available", cr.AvailableDeviceIDs,
			"mustInclude", cr.MustIncludeDeviceIDs, "size", cr.AllocationSize, "preferred", ids)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// sanitize keeps a preference the kubelet can use: known (available or
// must-include) IDs, no duplicates, every must-include ID, at most size.
// An answer that cannot honour mustInclude within size becomes empty.
func sanitize(pref, available, mustInclude []string, size int) []string {
	if len(pref) == 0 {
		return nil
	}
	known := map[string]bool{}
	for _, id := range available {
		known[id] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, id := range mustInclude {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, id := range pref {
		if known[id] && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	if size > 0 && len(out) > size {
		if len(mustInclude) > size {
			return nil
		}
		out = out[:size]
	}
	return out
}

// PreStartContainer runs before every start of a container, also the first after a node
// reboot, when the kubelet reuses the devices and CDI names it checkpointed and calls no
// Allocate. It refuses to let a container start unless each of its devices is realized (the
// agent recreated its instance at its slot and wrote its spec), and rewrites the container's
// set spec with the MIG UUIDs of now. A refusal fails the container's start; the kubelet
// retries it.
func (s *server) PreStartContainer(_ context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	devs, err := s.realized(req.DevicesIds)
	if err == nil {
		_, err = s.writeSet(devs)
	}
	if err != nil {
		s.m.log.Info("refusing a container start", "resource", s.resource, "devices", req.DevicesIds, "reason", err.Error())
		return nil, err
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

// ResourcesFor lists the resource names of every profile of the given models.
func ResourcesFor(models []mig.Model) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range models {
		for _, p := range m.Profiles() {
			if r := p.ResourceName(); !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	sort.Strings(out)
	return out
}
