package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/dra"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

const nodeName = "node-a"

// clock is the plugin's clock, moved by the test only.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// plugin is one run of the DRA plugin (one process lifetime), served on unix sockets in dir,
// and a kubelet-side gRPC client of it.
type plugin struct {
	drv     *dra.Driver
	metrics *engine.Metrics
	cancel  context.CancelFunc
	done    chan error
	conn    *grpc.ClientConn
	kubelet drapbv1.DRAPluginClient
}

type harness struct {
	t  *testing.T
	cs kubernetes.Interface
	// status reads the NodeAccelerator; statusWrites counts the plugin's status writes.
	status       client.Client
	statusWrites atomic.Int64
	scheme       *k8sruntime.Scheme
	// kill cuts the running plugin off the apiserver: a plugin killed at a crash point
	// (emulated.Backend.CrashAfter) sends no request any more.
	kill   *framework.KillSwitch
	lib    *emulated.Backend
	dir    string
	cdi    *cdi.Writer
	clock  *clock
	grace  time.Duration
	plugin *plugin
	// events records the plugin's Events through the events API (tests read them back).
	events events.EventRecorder
	// cfg reaches the apiserver as its admin.
	cfg *rest.Config
	// nvmlOpts make the emulated NVML of a new process (its state file kept).
	nvmlOpts emulated.Options
	// gpuModes is the plugin's --gpu-modes (whole_test.go).
	gpuModes []slicerv1alpha1.GPUModePolicy
}

func (h *harness) start() {
	h.t.Helper()
	// The plugin's clock only moves when the test moves it, so status writes are not
	// coalesced (a deferred write would wait for a time that never comes).
	metrics := engine.NewMetrics(prometheus.NewRegistry())
	h.kill = &framework.KillSwitch{}
	cfg := h.kill.Config(h.cfg)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	direct, err := client.NewWithWatch(cfg, client.Options{Scheme: h.scheme})
	if err != nil {
		h.t.Fatal(err)
	}
	status := interceptor.NewClient(direct, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			h.statusWrites.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	drv := dra.New(dra.Options{NodeName: nodeName, Library: h.lib, Emulated: true, Client: cs, Status: status, Events: h.events, PublishInterval: -1,
		CDI: h.cdi, Metrics: metrics, OrphanGrace: h.grace, Resync: time.Hour,
		Now: h.clock.Now, Log: testr.New(h.t), GPUModes: h.gpuModes})
	ctx, cancel := context.WithCancel(context.Background())
	p := &plugin{drv: drv, metrics: metrics, cancel: cancel, done: make(chan error, 1)}
	sock := filepath.Join(h.dir, "dra.sock")
	_ = os.Remove(sock)
	go func() {
		p.done <- drv.Run(ctx, kubeletplugin.PluginDataDirectoryPath(h.dir), kubeletplugin.RegistrarDirectoryPath(filepath.Join(h.dir, "registry")))
	}()
	waitFor(h.t, "the plugin's socket", func() (bool, error) {
		_, err := os.Stat(sock)
		return err == nil, nil
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	p.conn, p.kubelet = conn, drapbv1.NewDRAPluginClient(conn)
	h.plugin = p
}

func (h *harness) stop() {
	h.t.Helper()
	p := h.plugin
	_ = p.conn.Close()
	p.cancel()
	if err := <-p.done; err != nil {
		h.t.Fatalf("plugin run: %v", err)
	}
	h.plugin = nil
}

// waitFor polls until cond holds (the plugin and the ResourceSlice controller work in the
// background); it gives up after a minute, long past any expected delay.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// allocate creates a claim with one request of len(devices) devices and writes its
// allocation as the scheduler would.
func (h *harness) allocate(name string, devices ...string) *resourceapi.ResourceClaim {
	h.t.Helper()
	return h.allocateFor(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default"}}, name, devices...)
}

// allocateFor is allocate in pod's namespace; a pod with a name is the claim's consumer
// (status.reservedFor, as the scheduler writes it before binding the pod), and the claim
// carries the finalizer the scheduler adds.
func (h *harness) allocateFor(pod *corev1.Pod, name string, devices ...string) *resourceapi.ResourceClaim {
	h.t.Helper()
	ctx := context.Background()
	ns := pod.Namespace
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "mig.slicer.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(len(devices))},
		}}}}}
	if pod.Name != "" {
		c.Finalizers = []string{resourceapi.Finalizer}
	}
	c, err := h.cs.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var res []resourceapi.DeviceRequestAllocationResult
	for _, d := range devices {
		res = append(res, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: migdra.DriverName, Pool: nodeName, Device: d})
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: res}}
	if pod.Name != "" {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	}
	c, err = h.cs.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) deleteClaim(c *resourceapi.ResourceClaim) {
	h.t.Helper()
	if err := h.cs.ResourceV1().ResourceClaims(c.Namespace).Delete(context.Background(), c.Name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func ref(c *resourceapi.ResourceClaim) *drapbv1.Claim {
	return &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
}

// prepareResult calls NodePrepareResources for one claim.
func (h *harness) prepareResult(c *resourceapi.ResourceClaim) *drapbv1.NodePrepareResourceResponse {
	h.t.Helper()
	resp, err := h.plugin.kubelet.NodePrepareResources(context.Background(), &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{ref(c)}})
	if err != nil {
		h.t.Fatalf("prepare %s: %v", c.Name, err)
	}
	r := resp.Claims[string(c.UID)]
	if r == nil {
		h.t.Fatalf("prepare %s: no result", c.Name)
	}
	return r
}

// prepare prepares one claim and returns its CDI device IDs by device.
func (h *harness) prepare(c *resourceapi.ResourceClaim) map[string][]string {
	h.t.Helper()
	r := h.prepareResult(c)
	if r.Error != "" {
		h.t.Fatalf("prepare %s: %s", c.Name, r.Error)
	}
	out := map[string][]string{}
	for _, d := range r.Devices {
		if d.PoolName != nodeName || !slices.Equal(d.RequestNames, []string{"gpu"}) {
			h.t.Fatalf("prepare %s: device %+v", c.Name, d)
		}
		out[d.DeviceName] = d.CdiDeviceIds
	}
	return out
}

func (h *harness) unprepare(c *resourceapi.ResourceClaim) {
	h.t.Helper()
	resp, err := h.plugin.kubelet.NodeUnprepareResources(context.Background(), &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{ref(c)}})
	if err != nil {
		h.t.Fatalf("unprepare %s: %v", c.Name, err)
	}
	if r := resp.Claims[string(c.UID)]; r == nil || r.Error != "" {
		h.t.Fatalf("unprepare %s: %+v", c.Name, r)
	}
}

// instances are the emulated GPUs' instances as DRA device names (each complete, with its
// MIG device UUID).
func (h *harness) instances() map[string]string {
	h.t.Helper()
	out := map[string]string{}
	for _, in := range h.lib.Instances() {
		m, _ := mig.ParseModel("H100-80GB")
		p, err := m.Profile(in.Profile)
		if err != nil {
			h.t.Fatal(err)
		}
		out[migdra.DeviceName(in.GPU, p, in.Placement)] = in.MIGUUID
	}
	return out
}

// newHarness starts a plugin on a node of two emulated H100s; each option sets the harness up
// before the plugin's first start.
func newHarness(t *testing.T, options ...func(*harness)) *harness {
	cs, env := startEnv(t, nil)
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), builder.Node(nodeName).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "dra") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	h100, _ := mig.ParseModel("H100-80GB")
	nvmlOpts := emulated.Options{Node: nodeName, GPUs: []mig.Model{h100, h100}, StateFile: filepath.Join(dir, "nvml.json")}
	lib, err := emulated.New(nvmlOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "registry"), 0o700); err != nil {
		t.Fatal(err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	eventsCtx, stopEvents := context.WithCancel(context.Background())
	if err := broadcaster.StartRecordingToSinkWithContext(eventsCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopEvents(); broadcaster.Shutdown() })
	h := &harness{t: t, cs: cs, lib: lib, dir: dir, cdi: &cdi.Writer{Dir: filepath.Join(dir, "cdi")},
		clock: &clock{now: time.Unix(1_000_000, 0)}, grace: 5 * time.Minute,
		events: broadcaster.NewRecorder(scheme.Scheme, "slicer-agent"), cfg: env.Config, nvmlOpts: nvmlOpts}
	h.scheme = env.Scheme
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	h.status = direct
	for _, o := range options {
		o(h)
	}
	h.start()
	t.Cleanup(func() {
		if h.plugin != nil {
			h.stop()
		}
	})
	return h
}

// The kubelet's calls, made over the plugin's unix socket against real claims: Prepare creates
// exactly the allocated instances and a CDI spec naming them, is idempotent, and Unprepare
// undoes it, also across a restart of the plugin; the node's pool is on the apiserver.
func TestKubeletPrepareUnprepare(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()

	waitFor(t, "the node's ResourceSlices", func() (bool, error) {
		l, err := h.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		counters, devices := 0, 0
		for _, s := range l.Items {
			if s.Spec.Driver == migdra.DriverName && s.Spec.Pool.Name == nodeName {
				counters += len(s.Spec.SharedCounters)
				devices += len(s.Spec.Devices)
			}
		}
		return counters == 2 && devices > 0, errors.New("no pool yet")
	})

	a := h.allocate("a", "gpu-0-3g-40gb-at-4", "gpu-1-1g-10gb-at-6")
	got := h.prepare(a)
	inst := h.instances()
	if len(inst) != 2 || inst["gpu-0-3g-40gb-at-4"] == "" || inst["gpu-1-1g-10gb-at-6"] == "" {
		t.Fatalf("instances after prepare: %v", inst)
	}
	for dev, ids := range got {
		want := cdi.QualifiedName(cdi.ClaimDeviceName(string(a.UID), inst[dev]))
		if !slices.Equal(ids, []string{want}) {
			t.Fatalf("device %s: CDI ids %v, want [%s]", dev, ids, want)
		}
	}
	if err := cdi.Validate(h.cdi.ClaimPath(string(a.UID))); err != nil {
		t.Fatal(err)
	}
	recorded, ok, err := h.cdi.ReadClaim(string(a.UID))
	if err != nil || !ok || len(recorded) != 2 {
		t.Fatalf("claim spec: %v, %v, %v", recorded, ok, err)
	}

	creates := h.lib.Calls(emulated.OpCreateGPUInstance)
	again := h.prepare(a)
	if !mapsEqual(got, again) || h.lib.Calls(emulated.OpCreateGPUInstance) != creates || !mapsEqualS(inst, h.instances()) {
		t.Fatalf("second prepare not idempotent: %v then %v; instances %v then %v", got, again, inst, h.instances())
	}

	h.unprepare(a)
	if inst := h.instances(); len(inst) != 0 {
		t.Fatalf("instances after unprepare: %v", inst)
	}
	if _, err := os.Stat(h.cdi.ClaimPath(string(a.UID))); !os.IsNotExist(err) {
		t.Fatalf("claim spec after unprepare: %v", err)
	}
	h.unprepare(a) // already undone: success

	// Prepared by one run, prepared again and unprepared by the next.
	b := h.allocate("b", "gpu-0-7g-80gb-at-0")
	first := h.prepare(b)
	h.stop()
	h.start()
	if again := h.prepare(b); !mapsEqual(first, again) {
		t.Fatalf("prepare after restart: %v, before %v", again, first)
	}
	h.unprepare(b)
	if inst := h.instances(); len(inst) != 0 {
		t.Fatalf("instances after unprepare across a restart: %v", inst)
	}

	// The run that prepared c died before its spec was written: the next run finds the
	// instances from the claim's allocation.
	c := h.allocate("c", "gpu-1-2g-20gb-at-2")
	h.prepare(c)
	h.stop()
	if err := h.cdi.RemoveClaim(string(c.UID)); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.unprepare(c)
	if inst := h.instances(); len(inst) != 0 {
		t.Fatalf("instances after unprepare without a spec: %v", inst)
	}

	// d's device is allocated to e (d deallocated) before the kubelet unprepares d: e is not
	// prepared onto d's instance while the node's record keeps it for d; d's Unprepare
	// destroys it, and e gets an instance of its own.
	d := h.allocate("d", "gpu-0-4g-40gb-at-0")
	h.prepare(d)
	dInstance := h.instances()["gpu-0-4g-40gb-at-0"]
	h.deleteClaim(d)
	e := h.allocate("e", "gpu-0-4g-40gb-at-0")
	if r := h.prepareResult(e); r.Error == "" {
		t.Fatalf("e was prepared onto d's instance before d was unprepared: %+v", r)
	}
	h.unprepare(d)
	if inst := h.instances(); len(inst) != 0 {
		t.Fatalf("instances after d's unprepare: %v", inst)
	}
	h.prepare(e)
	if inst := h.instances(); len(inst) != 1 || inst["gpu-0-4g-40gb-at-0"] == dInstance {
		t.Fatalf("e's instance: %v, d's was %s", inst, dInstance)
	}
	h.unprepare(e)
	if inst := h.instances(); len(inst) != 0 {
		t.Fatalf("instances after e's unprepare: %v", inst)
	}

	// Two claims allocated the same device at once (an allocator bug): the second is refused.
	f := h.allocate("f", "gpu-1-1g-10gb-at-0")
	g := h.allocate("g", "gpu-1-1g-10gb-at-0")
	if r := h.prepareResult(f); !strings.Contains(r.Error, "also allocated") {
		t.Fatalf("a doubly allocated device was prepared: %+v", r)
	}
	h.deleteClaim(g)
	h.prepare(f)
	h.unprepare(f)
	for _, cl := range []*resourceapi.ResourceClaim{a, b, c, e, f} {
		h.deleteClaim(cl)
	}
}

// An instance no allocated claim explains is destroyed only after the grace period; one an
// allocated (not yet prepared) claim holds is kept.
func TestOrphanCollectedAfterGrace(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, err := h.lib.CreateInstance(0, "1g.10gb", 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.lib.CreateInstance(1, "3g.40gb", 0, false); err != nil {
		t.Fatal(err)
	}
	h.allocate("held", "gpu-1-3g-40gb-at-0")
	// A claim whose placement the orphan overlaps fails to prepare until the orphan goes.
	late := h.allocate("late", "gpu-0-2g-20gb-at-0")
	if r := h.prepareResult(late); r.Error == "" {
		t.Fatalf("prepared beside an overlapping orphan: %+v", r)
	}
	sync := func() {
		t.Helper()
		if err := h.plugin.drv.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sync() // first sighting
	h.clock.Add(h.grace - time.Second)
	sync()
	if inst := h.instances(); len(inst) != 2 {
		t.Fatalf("orphan collected before its grace: %v", inst)
	}
	h.clock.Add(2 * time.Second)
	sync()
	inst := h.instances()
	if _, ok := inst["gpu-0-1g-10gb-at-0"]; ok || len(inst) != 1 || inst["gpu-1-3g-40gb-at-0"] == "" {
		t.Fatalf("after the grace: %v, want only the held instance", inst)
	}
	h.prepare(late)
	if inst := h.instances(); len(inst) != 2 || inst["gpu-0-2g-20gb-at-0"] == "" {
		t.Fatalf("after the orphan went, late's instance: %v", inst)
	}
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func mapsEqualS(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
