package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/device-plugin/podresources"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
	"github.com/slicer-operator/slicer/test/framework"
)

const (
	node = "127.0.0.1"
	// the namespace config/overlays/emulated installs the operator into; it runs the scheduler and webhook there
	operatorNamespace = "slicer-system"
	// where the emulated agent keeps its GPUs (operator/render: EmulatedStateDir) and where
	// containerd reads CDI specs on the local node
	emulatedStateFile = "/var/lib/slicer/emulated-gpus.json"
	cdiDir            = "/var/run/cdi"
	podResourcesSock  = "/var/lib/kubelet/pod-resources/kubelet.sock"
)

// slicePod is a pod that asks for one MIG slice the way users do
// (nvidia.com/mig-<profile>), prints what its container received, and waits.
func slicePod(ns, name, profile string) *corev1.Pod {
	return builder.Pod(ns, name).RestartNever().
		Container("main", builder.Limits(mig.NVIDIAResourcePrefix+profile, "1")).Shell(printDevice + waitForTerm).Obj()
}

func plainPod(ns, name string) *corev1.Pod {
	return builder.Pod(ns, name).RestartNever().Container("main", builder.None).Shell(printDevice + waitForTerm).Obj()
}

// createPod creates a pod and records its creation for the latency log.
func createPod(ctx context.Context, p *corev1.Pod) {
	latency.created(p.Namespace, p.Name)
	Expect(k8s.Create(ctx, p)).To(Succeed())
}

func podPhase(ctx context.Context, ns, name string) corev1.PodPhase {
	var p corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		return ""
	}
	return p.Status.Phase
}

func waitRunning(ctx context.Context, ns string, names ...string) {
	for _, n := range names {
		Eventually(podPhase).WithContext(ctx).WithArguments(ns, n).WithTimeout(2*time.Minute).Should(Equal(corev1.PodRunning), "pod %s/%s", ns, n)
	}
}

// containerSaw returns the fields a container of the pod printed (visible, device, profile,
// ...): the named container, or the pod's only one.
func containerSaw(ctx context.Context, ns, name string, container ...string) (map[string]string, error) {
	opts := &corev1.PodLogOptions{}
	if len(container) > 0 {
		opts.Container = container[0]
	}
	raw, err := clientset.CoreV1().Pods(ns).GetLogs(name, opts).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("logs of %s/%s %v: %w", ns, name, container, err)
	}
	out, ok := localnode.PrintedFields(raw, "visible")
	if !ok {
		return nil, fmt.Errorf("pod %s/%s has not printed yet: %q", ns, name, localnode.Tail(string(raw), 1))
	}
	return out, nil
}

// allocationsOf lists the SliceAllocations of the pods in a namespace.
func allocationsIn(ctx context.Context, ns string) []slicerv1alpha1.SliceAllocation {
	var l slicerv1alpha1.SliceAllocationList
	Expect(k8s.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
	return l.Items
}

// deviceView is the agent's side: the emulated GPUs' MIG instances (the
// state file the agent keeps on the host), the kubelet's advertised devices
// (PodResources GetAllocatableResources) and the CDI specs on the host.
type deviceView struct {
	instances  []framework.DeviceInstance
	models     map[string]mig.Model
	advertised map[string]string
	cdi        []string
	// kubelet's assignment: device ID → "namespace/name"
	assigned map[string]string
}

func readDeviceView(ctx context.Context) (deviceView, error) {
	v := deviceView{models: map[string]mig.Model{}, advertised: map[string]string{}, assigned: map[string]string{}}
	insts, err := emulated.ReadStateFile(emulatedStateFile)
	if err != nil {
		return v, err
	}
	for _, si := range insts {
		v.models[si.GPUUUID] = si.Model
		if len(si.MIGUUIDs) == 0 {
			v.instances = append(v.instances, framework.DeviceInstance{GPUUUID: si.GPUUUID, Profile: si.Profile, Placement: si.Placement})
		}
		for _, u := range si.MIGUUIDs {
			v.instances = append(v.instances, framework.DeviceInstance{GPUUUID: si.GPUUUID, Profile: si.Profile, Placement: si.Placement, MIGUUID: u})
		}
	}
	if v.cdi, err = (&cdi.Writer{Dir: cdiDir}).List(); err != nil {
		return v, err
	}
	conn, err := grpc.NewClient("unix://"+podResourcesSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return v, fmt.Errorf("pod resources: %w", err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pr := podresourcesapi.NewPodResourcesListerClient(conn)
	alloc, err := pr.GetAllocatableResources(cctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return v, fmt.Errorf("pod resources allocatable: %w", err)
	}
	for _, d := range alloc.GetDevices() {
		if podresources.Served(d.GetResourceName()) {
			for _, id := range d.GetDeviceIds() {
				v.advertised[id] = d.GetResourceName()
			}
		}
	}
	list, err := pr.List(cctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return v, fmt.Errorf("pod resources list: %w", err)
	}
	for _, p := range list.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if podresources.Served(d.GetResourceName()) {
					for _, id := range d.GetDeviceIds() {
						v.assigned[id] = p.GetNamespace() + "/" + p.GetName()
					}
				}
			}
		}
	}
	return v, nil
}

// checkInvariants checks I1–I4 between the API view (every SliceAllocation on
// the node) and the device view.
func checkInvariants(ctx context.Context) error {
	allocs, err := framework.ListAllocations(ctx, k8s, node)
	if err != nil {
		return err
	}
	v, err := readDeviceView(ctx)
	if err != nil {
		return err
	}
	errs := []error{framework.CheckAgentInvariants(allocs, v.instances, v.models, v.advertised, v.cdi, nil)}
	// I1 from the kubelet's side: a device handed to a pod is held by that pod's allocation
	holder := map[string]string{}
	for _, a := range allocs {
		if (a.Status.MIGDeviceUUID != "" || a.Spec.WholeGPU && a.Status.State == slicerv1alpha1.AllocationReady) && a.DeletionTimestamp == nil {
			holder[framework.DeviceIDOf(&a)] = a.Namespace + "/" + a.Spec.PodName
		}
	}
	for id, pod := range v.assigned {
		if h, ok := holder[id]; ok && h != pod {
			errs = append(errs, fmt.Errorf("I1: kubelet gave %s to %s, its allocation is %s's", id, pod, h))
		}
	}
	return errors.Join(errs...)
}

// specOverlaps checks I1 on the scheduler's decisions (cheap enough to sample
// during churn): no two live allocations were given overlapping slots on a
// GPU. (Where a slice really is can differ for a moment when the kubelet hands
// a pod another realized slice of its profile; checkInvariants judges that
// once the node has settled.)
func specOverlaps(ctx context.Context) error {
	allocs, err := framework.ListAllocations(ctx, k8s, node)
	if err != nil {
		return err
	}
	var errs []error
	for i, a := range allocs {
		for _, b := range allocs[:i] {
			if !live(a) || !live(b) || a.Spec.GPUUUID != b.Spec.GPUUUID {
				continue
			}
			sa, sb := migapi.SlotAsWritten(&a.Spec), migapi.SlotAsWritten(&b.Spec)
			if sa.Overlaps(sb) {
				errs = append(errs, fmt.Errorf("I1: %s/%s (%s, %s) and %s/%s (%s, %s) were given overlapping slots",
					a.Namespace, a.Name, sa, a.Status.State, b.Namespace, b.Name, sb, b.Status.State))
			}
		}
	}
	return errors.Join(errs...)
}

func live(a slicerv1alpha1.SliceAllocation) bool {
	return a.DeletionTimestamp == nil && a.Status.State != slicerv1alpha1.AllocationFailed
}

// killProcess SIGKILLs every process running an executable named exe (inside
// its container), as a crash would; it returns how many it killed.
func killProcess(exe string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	n := 0
	for _, p := range procs {
		target, err := os.Readlink(filepath.Join(p, "exe"))
		if err != nil || filepath.Base(target) != exe {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(p), "%d", &pid); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// latencyLog records, for every slice pod the suite creates, when it was
// created and when the suite first saw its allocation Ready, the pod bound and
// the pod Running (watch events, this process's clock: API timestamps have
// one-second resolution).
type latencyLog struct {
	mu    sync.Mutex
	group map[string]string // pod key → group
	pods  map[string]*podTimes
}

type podTimes struct {
	created, bound, sliceReady, running time.Time
}

func newLatencyLog() *latencyLog {
	return &latencyLog{group: map[string]string{}, pods: map[string]*podTimes{}}
}

var currentGroup = "burst"

func (l *latencyLog) created(ns, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ns + "/" + name
	l.pods[k] = &podTimes{created: time.Now()}
	l.group[k] = currentGroup
}

func (l *latencyLog) observe(key string, f func(t *podTimes)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.pods[key]; ok {
		f(t)
	}
}

func (l *latencyLog) start(ctx context.Context, cfg *rest.Config) error {
	c, err := cache.New(cfg, cache.Options{Scheme: framework.NewScheme()})
	if err != nil {
		return fmt.Errorf("latency cache: %w", err)
	}
	podInf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		l.observe(p.Namespace+"/"+p.Name, func(t *podTimes) {
			if t.bound.IsZero() && p.Spec.NodeName != "" {
				t.bound = now
			}
			if t.running.IsZero() && p.Status.Phase == corev1.PodRunning {
				t.running = now
			}
		})
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, n any) { onPod(n) }}); err != nil {
		return fmt.Errorf("pod handler: %w", err)
	}
	allocInf, err := c.GetInformer(ctx, &slicerv1alpha1.SliceAllocation{})
	if err != nil {
		return fmt.Errorf("allocation informer: %w", err)
	}
	onAlloc := func(obj any) {
		a, ok := obj.(*slicerv1alpha1.SliceAllocation)
		if !ok || a.Status.State != slicerv1alpha1.AllocationReady {
			return
		}
		now := time.Now()
		l.observe(a.Namespace+"/"+a.Spec.PodName, func(t *podTimes) {
			if t.sliceReady.IsZero() {
				t.sliceReady = now
			}
		})
	}
	if _, err := allocInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onAlloc, UpdateFunc: func(_, n any) { onAlloc(n) }}); err != nil {
		return fmt.Errorf("allocation handler: %w", err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return errors.New("latency cache did not sync")
	}
	return nil
}

// report renders p50/p99 per group of create → Running and of its phases.
func (l *latencyLog) report() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	groups := map[string][]*podTimes{}
	var names []string
	for k, t := range l.pods {
		g := l.group[k]
		if t.running.IsZero() {
			continue
		}
		if _, ok := groups[g]; !ok {
			names = append(names, g)
		}
		groups[g] = append(groups[g], t)
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	var b strings.Builder
	// The phases in the order they happen: the scheduler binds only once the slice is
	// Ready (PreBind waits for the agent), then the kubelet starts the container.
	b.WriteString("| pods | n | create → Running p50 / p99 | create → slice Ready p50 / p99 | slice Ready → bound p50 / p99 | bound → Running p50 / p99 |\n|---|---|---|---|---|---|\n")
	for _, g := range names {
		ts := groups[g]
		col := func(from, to func(*podTimes) time.Time) string {
			var d []time.Duration
			for _, t := range ts {
				if !from(t).IsZero() && !to(t).IsZero() {
					d = append(d, to(t).Sub(from(t)))
				}
			}
			if len(d) == 0 {
				return "-"
			}
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			return fmt.Sprintf("%s / %s", pct(d, 50), pct(d, 99))
		}
		created := func(t *podTimes) time.Time { return t.created }
		bound := func(t *podTimes) time.Time { return t.bound }
		ready := func(t *podTimes) time.Time { return t.sliceReady }
		running := func(t *podTimes) time.Time { return t.running }
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", g, len(ts), col(created, running), col(created, ready), col(ready, bound), col(bound, running))
	}
	return b.String()
}

func pct(sorted []time.Duration, p int) string {
	i := (len(sorted)*p+99)/100 - 1
	if i < 0 {
		i = 0
	}
	return fmt.Sprintf("%.2fs", sorted[i].Seconds())
}

func createNamespace(ctx context.Context, name string) {
	localnode.CreateNamespace(ctx, k8s, clientset, name)
}

func deleteNamespace(ctx context.Context, name string) { localnode.DeleteNamespace(ctx, k8s, name) }

// expectDevicesGone waits until the namespace has no allocation and none of the MIG devices
// its pods had is left, as an instance or a CDI spec, and the node's views agree (I2).
func expectDevicesGone(ctx context.Context, ns string, devices map[string]bool) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(allocationsIn(ctx, ns)).To(BeEmpty())
		v, err := readDeviceView(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, d := range v.instances {
			g.Expect(devices).NotTo(HaveKey(d.MIGUUID), "instance %s still exists", d.MIGUUID)
		}
		for _, d := range v.cdi {
			g.Expect(devices).NotTo(HaveKey(d), "CDI spec for %s still exists", d)
		}
		// and gone from what the agent publishes, which is what the scheduler places by: a pod
		// created while the NodeAccelerator still lists a destroyed slice is placed around it
		var na slicerv1alpha1.NodeAccelerator
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, &na)).To(Succeed())
		for _, gpu := range na.Status.GPUs {
			for _, sl := range gpu.Slices {
				g.Expect(devices).NotTo(HaveKey(sl.MIGDeviceUUID), "NodeAccelerator %s still lists %s", node, sl.MIGDeviceUUID)
			}
		}
		g.Expect(checkInvariants(ctx)).To(Succeed())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}
