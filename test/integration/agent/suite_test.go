// Package agent_test runs the node agent (emulated NVML) against a real
// kube-apiserver: allocations become MIG devices at their exact placements,
// releases destroy them, and restarts, reboots, faults, in-use devices,
// unknown instances and foreign MIG managers converge without breaking the
// invariants I1–I5, I10 and I11.
package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
	"github.com/slicer-operator/slicer/test/suite"
)

var (
	env *framework.Env
	k8s client.Client
	ctx = context.Background()
)

func TestAgent(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Node agent suite")
}

var _ = BeforeSuite(func() {
	env = suite.Start(framework.Options{WithoutExternalCRDs: true}, "team-a")
	k8s = env.Client
})

// node is one emulated GPU node with its agent.
type node struct {
	name    string
	models  []mig.Model
	stateF  string
	cdiDir  string
	backend *emulated.Backend
	agent   *framework.RunningAgent
	adv     *framework.RecordingAdvertiser
	usage   *framework.StaticUsage
	metrics *engine.Metrics
	grace   time.Duration
	seq     int
	// cfg, when set, is how the agent reaches the apiserver (default the Env's).
	cfg *rest.Config
	// migOff lists the GPUs whose MIG mode is off at first boot (emulated.Options.MIGDisabled).
	migOff []int
	// gpuModes is the agent's --gpu-modes (agent.Options.GPUModes).
	gpuModes []slicerv1alpha1.GPUModePolicy
}

func newNode(name string, models ...mig.Model) *node {
	return newNodeMIGOff(name, nil, models...)
}

// newNodeMIGOff is newNode with the GPUs of migOff whole (MIG mode off) at first boot.
func newNodeMIGOff(name string, migOff []int, models ...mig.Model) *node {
	dir := GinkgoT().TempDir()
	n := &node{name: name, models: models, stateF: filepath.Join(dir, "nvml.json"), cdiDir: filepath.Join(dir, "cdi"),
		adv: &framework.RecordingAdvertiser{}, usage: &framework.StaticUsage{}, grace: time.Hour, migOff: migOff}
	Expect(k8s.Create(ctx, builder.Node(name).Obj())).To(Succeed())
	n.newBackend()
	return n
}

// newBackend is a process restart of the emulated NVML (state file kept).
func (n *node) newBackend() {
	b, err := emulated.New(emulated.Options{Node: n.name, GPUs: n.models, StateFile: n.stateF, MIGDisabled: n.migOff})
	Expect(err).NotTo(HaveOccurred())
	n.backend = b
}

func (n *node) start() {
	n.metrics = engine.NewMetrics(prometheus.NewRegistry())
	a, err := env.StartAgent(framework.AgentOptions{Node: n.name, Library: n.backend, CDIDir: n.cdiDir, OrphanGrace: n.grace,
		Usage: n.usage, Advertiser: n.adv, Metrics: n.metrics, PodGone: true, Config: n.cfg, GPUModes: n.gpuModes}, zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(err).NotTo(HaveOccurred())
	n.agent = a
}

func (n *node) stop() {
	if n.agent != nil {
		Expect(n.agent.Stop()).To(Succeed())
		n.agent = nil
	}
}

func (n *node) gpu(i int) string { return emulated.GPUUUID(n.name, i) }

// allocate creates a pod bound to the node and its allocation, as the scheduler does: with
// the agent's finalizer already set.
func (n *node) allocate(gpu int, profile string, start, size int32) *slicerv1alpha1.SliceAllocation {
	return n.create(n.build(gpu, profile, start, size), true)
}

// allocateV010 is allocate as a scheduler up to v0.1.0 did it: without the finalizer, which
// the agent adds (the upgrade path).
func (n *node) allocateV010(gpu int, profile string, start, size int32) *slicerv1alpha1.SliceAllocation {
	return n.create(n.build(gpu, profile, start, size), false)
}

func (n *node) build(gpu int, profile string, start, size int32) *slicerv1alpha1.SliceAllocation {
	n.seq++
	name := fmt.Sprintf("%s-a%d", n.name, n.seq)
	p := n.pod(name)
	a := framework.MakeSliceAllocation("team-a", name).Node(n.name).GPU(n.gpu(gpu)).Profile(profile, start, size).
		Pod(name, string(p.UID)).Obj()
	a.Labels = map[string]string{slicerv1alpha1.LabelNode: n.name, slicerv1alpha1.LabelPodUID: a.Spec.PodUID}
	return a
}

func (n *node) create(a *slicerv1alpha1.SliceAllocation, finalizer bool) *slicerv1alpha1.SliceAllocation {
	if finalizer {
		a.Finalizers = []string{slicerv1alpha1.AllocationFinalizer}
	}
	Expect(k8s.Create(ctx, a)).To(Succeed())
	return a
}

// pod creates a pod bound to the node.
func (n *node) pod(name string) *corev1.Pod {
	p := builder.Pod("team-a", name).Node(n.name).Container("c", builder.None).Obj()
	Expect(k8s.Create(ctx, p)).To(Succeed())
	return p
}

func (n *node) get(a *slicerv1alpha1.SliceAllocation) *slicerv1alpha1.SliceAllocation {
	var got slicerv1alpha1.SliceAllocation
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(a), &got)).To(Succeed())
	return &got
}

func (n *node) waitReady(a *slicerv1alpha1.SliceAllocation) *slicerv1alpha1.SliceAllocation {
	var got slicerv1alpha1.SliceAllocation
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(a), &got)).To(Succeed())
		g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady), "status %+v", got.Status)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return &got
}

func (n *node) waitGone(a *slicerv1alpha1.SliceAllocation) {
	Eventually(func() bool {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(a), &slicerv1alpha1.SliceAllocation{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(30 * time.Second).Should(BeTrue())
}

func (n *node) nodeAccelerator(g Gomega) *slicerv1alpha1.NodeAccelerator {
	var na slicerv1alpha1.NodeAccelerator
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: n.name}, &na)).To(Succeed())
	return &na
}

// waitCondition waits until the node's NodeAccelerator has condition typ with status, with
// reason when it is not empty, and a message that contains each of messages; also, when not
// nil, makes more checks of the same NodeAccelerator in the same attempt.
func (n *node) waitCondition(typ string, status metav1.ConditionStatus, reason string, messages []string, also func(g Gomega, na *slicerv1alpha1.NodeAccelerator)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		na := n.nodeAccelerator(g)
		c := meta.FindStatusCondition(na.Status.Conditions, typ)
		g.Expect(c).NotTo(BeNil(), "condition %s", typ)
		g.Expect(c.Status).To(Equal(status), "condition %s: %s", typ, c.Message)
		if reason != "" {
			g.Expect(c.Reason).To(Equal(reason))
		}
		for _, m := range messages {
			g.Expect(c.Message).To(ContainSubstring(m))
		}
		if also != nil {
			also(g, na)
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

func (n *node) deviceInstances() []framework.DeviceInstance {
	var out []framework.DeviceInstance
	for _, in := range n.backend.Instances() {
		out = append(out, framework.DeviceInstance{GPUUUID: n.gpu(in.GPU), Profile: in.Profile, Placement: in.Placement, MIGUUID: in.MIGUUID})
	}
	return out
}

// invariants checks I1–I4 once the agent settled (extra: device UUIDs that
// may exist without an allocation, e.g. an in-use orphan).
func (n *node) invariants(extra ...string) {
	allowed := map[string]bool{}
	for _, e := range extra {
		allowed[e] = true
	}
	models := map[string]mig.Model{}
	for i, m := range n.models {
		models[n.gpu(i)] = m
	}
	Eventually(func() error {
		allocs, err := framework.ListAllocations(ctx, k8s, n.name)
		if err != nil {
			return err
		}
		w := &cdi.Writer{Dir: n.cdiDir}
		specs, err := w.List()
		if err != nil {
			return err
		}
		for _, s := range specs {
			if err := cdi.Validate(w.Path(s)); err != nil {
				return err
			}
		}
		if specs == nil {
			specs = []string{}
		}
		return framework.CheckAgentInvariants(allocs, n.deviceInstances(), models, n.adv.IDs(), specs, allowed)
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

func (n *node) release(a *slicerv1alpha1.SliceAllocation) {
	Expect(k8s.Delete(ctx, a)).To(Succeed())
}

func (n *node) cleanup() {
	n.stop()
	_ = os.RemoveAll(n.cdiDir)
}
