package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/cmd/slicer/cli"
	"github.com/slicer-operator/slicer/internal/slicemap"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// runCLI runs `slicer args...` and returns its exit code, stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := cli.Run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func setPodStatus(p *corev1.Pod, mutate func(*corev1.PodStatus)) {
	GinkgoHelper()
	mutate(&p.Status)
	Expect(k8s.Status().Update(ctx, p)).To(Succeed())
}

// createNodeAccelerator creates the node's NodeAccelerator with two H100s, a Ready driver and
// the given slices on GPU 0.
func createNodeAccelerator(node string, gpu0Slices ...slicerv1alpha1.MIGSlice) {
	GinkgoHelper()
	na := framework.MakeNodeAccelerator(node).GPUs("H100-80GB", 2).Obj()
	status := na.Status
	Expect(k8s.Create(ctx, na)).To(Succeed())
	status.Driver, status.DriverVersion = slicerv1alpha1.DriverStateReady, "550.54.15"
	status.GPUs[0].Slices = gpu0Slices
	na.Status = status
	Expect(k8s.Status().Update(ctx, na)).To(Succeed())
}

// unreachableKubeconfig writes a kubeconfig whose server refuses connections.
func unreachableKubeconfig() string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)).To(Succeed())
	return path
}

// pagingReader lists through a real client one object per page and counts the List calls.
type pagingReader struct {
	client.Reader
	lists int
}

func (r *pagingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists++
	return r.Reader.List(ctx, list, append(opts, client.Limit(1))...)
}

var _ = Describe("slicer slice-map", Ordered, func() {
	const (
		ns   = "team-cli"
		node = "cli-node-1"
		mig0 = "MIG-0a0a0a0a-0000-4000-8000-000000000000"
		mig1 = "MIG-1b1b1b1b-0000-4000-8000-000000000000"
	)
	gpu0, gpu1 := framework.GPUUUID(node, 0), framework.GPUUUID(node, 1)
	var trainPod, inferPod, waitingPod *corev1.Pod

	BeforeAll(func() {
		Expect(k8s.Create(ctx, framework.MakeNamespace(ns))).To(Succeed())

		trainPod = builder.Pod(ns, "train").Node(node).Container("main", builder.Both("slicer.dev/mig-3g.40gb", "1")).Obj()
		Expect(k8s.Create(ctx, trainPod)).To(Succeed())
		setPodStatus(trainPod, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
		inferPod = builder.Pod(ns, "infer").Node(node).Container("main", builder.Both("slicer.dev/mig-1g.10gb", "1")).Obj()
		Expect(k8s.Create(ctx, inferPod)).To(Succeed())
		setPodStatus(inferPod, func(s *corev1.PodStatus) { s.Phase = corev1.PodPending })
		waitingPod = builder.Pod(ns, "waiting").Container("main", builder.Both("slicer.dev/mig-7g.80gb", "1")).Obj()
		Expect(k8s.Create(ctx, waitingPod)).To(Succeed())
		setPodStatus(waitingPod, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodPending
			s.NominatedNodeName = node
			s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient slicer.dev/mig-7g.80gb."}}
		})

		// The scheduler's plan for the waiting pod, written as its event recorder writes it
		// (events.k8s.io/v1); slice-map reads it back through core/v1 by reason.
		Expect(k8s.Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "waiting.plan"},
			Regarding:  corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: "waiting", UID: waitingPod.UID},
			Reason:     slicerv1alpha1.EventDefragmentationPlanned, Action: "Recommend", Type: corev1.EventTypeNormal,
			Note:                "1 move(s): move pod team-cli/infer (1g.10gb) from node cli-node-1 GPU 1 @6 to node cli-node-1 GPU 0 @4; then 7g.80gb fits on node cli-node-1 GPU 1 @0",
			EventTime:           metav1.NewMicroTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)),
			ReportingController: "slicer-scheduler", ReportingInstance: "slicer-scheduler-0",
		})).To(Succeed())

		for _, a := range []*slicerv1alpha1.SliceAllocation{
			framework.MakeSliceAllocation(ns, "train").Pod("train", string(trainPod.UID)).Node(node).GPU(gpu0).Profile("3g.40gb", 0, 4).Obj(),
			framework.MakeSliceAllocation(ns, "infer").Pod("infer", string(inferPod.UID)).Node(node).GPU(gpu1).Profile("1g.10gb", 6, 1).Obj(),
		} {
			Expect(k8s.Create(ctx, a)).To(Succeed())
			a.Status.State = slicerv1alpha1.AllocationReady
			if a.Name == "infer" {
				a.Status.State = slicerv1alpha1.AllocationPending
			}
			Expect(k8s.Status().Update(ctx, a)).To(Succeed())
		}

		createNodeAccelerator(node,
			slicerv1alpha1.MIGSlice{Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 4}, GPUInstanceID: 2, ComputeInstanceID: 0,
				MIGDeviceUUID: mig0, State: slicerv1alpha1.SliceAllocated,
				Allocation: &slicerv1alpha1.AllocationReference{Namespace: ns, Name: "train"}},
			slicerv1alpha1.MIGSlice{Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: 5, Size: 1}, GPUInstanceID: 13, ComputeInstanceID: 0,
				MIGDeviceUUID: mig1, State: slicerv1alpha1.SliceOrphaned})
	})

	It("prints the node's slice map as text", func() {
		code, stdout, stderr := runCLI("slice-map", "--kubeconfig", kubeconfig, "--node", node)
		Expect(code).To(Equal(cli.ExitOK), stderr)
		Expect(stderr).To(BeEmpty())
		want := `NODE cli-node-1  driver Ready 550.54.15
  GPU 0  H100-80GB  ` + gpu0 + `  MIG Enabled  Healthy  [a a a a|.|b|.|.]  3/8 free
    KEY  PLACEMENT  PROFILE  STATE      MIG DEVICE    GI  CI  ALLOCATION              POD
    a    0+4        3g.40gb  Allocated  MIG-0a0a0a0a  2   0   team-cli/train (Ready)  team-cli/train (Running)
    b    5+1        1g.10gb  Orphaned   MIG-1b1b1b1b  13  0   -                       -
  GPU 1  H100-80GB  ` + gpu1 + `  MIG Enabled  Healthy  [.|.|.|.|.|.|.|.]  8/8 free
  not realized:
    ALLOCATION      GPU  PROFILE  PLACEMENT  STATE    POD                       REASON
    team-cli/infer  1    1g.10gb  6+1        Pending  team-cli/infer (Pending)  -

PENDING PODS
  POD               REQUESTS    NODE                    REASON
  team-cli/infer    1g.10gb x1  cli-node-1              -
  team-cli/waiting  7g.80gb x1  cli-node-1 (nominated)  Unschedulable: 0/1 nodes are available: 1 Insufficient slicer.dev/mig-7g.80gb.

WHY PENDING (Slicer's view of the GPUs above)
  team-cli/waiting  7g.80gb: none of 2 GPUs can take one now
    defragmentation plan: 1 move(s): move pod team-cli/infer (1g.10gb) from node cli-node-1 GPU 1 @6 to node cli-node-1 GPU 0 @4; then 7g.80gb fits on node cli-node-1 GPU 1 @0 (2026-11-27T10:00:00Z)
    cli-node-1 GPU 0  full  only 3 compute slices free, 7g.80gb needs 7
    cli-node-1 GPU 1  full  only 6 compute slices free, 7g.80gb needs 7
`
		Expect(cmp.Diff(want, stdout)).To(BeEmpty())
	})

	It("prints a stable JSON struct", func() {
		code, stdout, stderr := runCLI("slice-map", "--kubeconfig", kubeconfig, "--node", node, "-o", "json")
		Expect(code).To(Equal(cli.ExitOK), stderr)
		var m slicemap.Map
		Expect(json.Unmarshal([]byte(stdout), &m)).To(Succeed())
		Expect(m.Nodes).To(HaveLen(1))
		n := m.Nodes[0]
		Expect(n.GPUs).To(HaveLen(2))
		Expect(n.GPUs[0].Columns).To(Equal([]string{"a", "a", "a", "a", "", "b", "", ""}))
		Expect(n.GPUs[0].Problems).To(BeEmpty())
		train := n.GPUs[0].Slices[0].Allocation
		Expect(train).NotTo(BeNil())
		Expect(*train.Pod).To(Equal(slicemap.Pod{Namespace: ns, Name: "train", UID: string(trainPod.UID), Phase: "Running"}))
		Expect(n.GPUs[0].Slices[1].Allocation).To(BeNil())
		Expect(n.Unrealized).To(HaveLen(1))
		Expect(n.Unrealized[0].Name).To(Equal("infer"))
		Expect(n.Unrealized[0].GPUIndex).To(Equal(int32(1)))
		Expect(m.PendingPods).To(HaveLen(2))
		Expect(m.PendingPods[1].Requests).To(Equal([]slicemap.ResourceRequest{{Resource: "slicer.dev/mig-7g.80gb", Profile: "7g.80gb", Count: 1}}))
	})

	It("shows a pod whose allocation outlived it", func() {
		Expect(k8s.Delete(ctx, trainPod, client.GracePeriodSeconds(0))).To(Succeed())
		DeferCleanup(func() {
			trainPod = builder.Pod(ns, "train").Container("main", builder.Both("slicer.dev/mig-3g.40gb", "1")).Obj()
			// The recreated pod has a new UID: the allocation is then stale.
			Expect(k8s.Create(ctx, trainPod)).To(Succeed())
		})
		code, stdout, _ := runCLI("slice-map", "--kubeconfig", kubeconfig, "--node", node)
		Expect(code).To(Equal(cli.ExitOK))
		Expect(stdout).To(ContainSubstring("team-cli/train (Ready)  team-cli/train (not found)"))
	})

	It("shows a recreated pod as another incarnation", func() {
		code, stdout, _ := runCLI("slice-map", "--kubeconfig", kubeconfig, "--node", node)
		Expect(code).To(Equal(cli.ExitOK))
		Expect(stdout).To(ContainSubstring("team-cli/train (Pending, other UID: allocation is stale)"))
	})

	It("shows allocations on a node without a NodeAccelerator", func() {
		a := framework.MakeSliceAllocation(ns, "ghost").Pod("ghost", "uid-ghost").Node("cli-node-ghost").GPU(gpu0).Obj()
		Expect(k8s.Create(ctx, a)).To(Succeed())
		code, stdout, stderr := runCLI("slice-map", "--kubeconfig", kubeconfig, "--node", "cli-node-ghost")
		Expect(code).To(Equal(cli.ExitOK), stderr)
		Expect(cmp.Diff(`NODE cli-node-ghost  (no NodeAccelerator)
  not realized:
    ALLOCATION      GPU                         PROFILE  PLACEMENT  STATE  POD                         REASON
    team-cli/ghost  `+gpu0[:12]+` (not on node)  1g.10gb  0+1        -      team-cli/ghost (not found)  -

PENDING PODS: none
`, stdout)).To(BeEmpty())
	})

	It("reads every page of a list", func() {
		unpaged, err := slicemap.Fetch(ctx, k8s, "")
		Expect(err).NotTo(HaveOccurred())
		r := &pagingReader{Reader: k8s}
		paged, err := slicemap.Fetch(ctx, r, "")
		Expect(err).NotTo(HaveOccurred())
		// With one object per page there is at least one List call per object.
		Expect(r.lists).To(BeNumerically(">=", len(unpaged.NodeAccelerators)+len(unpaged.SliceAllocations)+len(unpaged.Pods)))
		Expect(cmp.Diff(slicemap.Build(unpaged, slicemap.Options{}), slicemap.Build(paged, slicemap.Options{}))).To(BeEmpty())
	})

	// client-go reads $HOME once, when it is loaded, so the ~/.kube/config fallback is not
	// tested here (it is client-go's RecommendedHomeFile).
	It("finds the kubeconfig through $KUBECONFIG", func() {
		old, had := os.LookupEnv("KUBECONFIG")
		DeferCleanup(func() {
			if had {
				Expect(os.Setenv("KUBECONFIG", old)).To(Succeed())
			} else {
				Expect(os.Unsetenv("KUBECONFIG")).To(Succeed())
			}
		})
		Expect(os.Setenv("KUBECONFIG", kubeconfig)).To(Succeed())
		code, stdout, stderr := runCLI("slice-map", "--node", node)
		Expect(code).To(Equal(cli.ExitOK), stderr)
		Expect(stdout).To(HavePrefix("NODE cli-node-1  driver Ready"))

		// --kubeconfig wins over $KUBECONFIG.
		Expect(os.Setenv("KUBECONFIG", unreachableKubeconfig())).To(Succeed())
		code, stdout, stderr = runCLI("slice-map", "--kubeconfig", kubeconfig, "--node", node)
		Expect(code).To(Equal(cli.ExitOK), stderr)
		Expect(stdout).To(HavePrefix("NODE cli-node-1  driver Ready"))
	})

	It("fails with exit code 1 when the apiserver cannot be reached", func() {
		bad := unreachableKubeconfig()
		code, stdout, stderr := runCLI("slice-map", "--kubeconfig", bad, "--timeout", "5s")
		Expect(code).To(Equal(cli.ExitError))
		Expect(stdout).To(BeEmpty())
		Expect(stderr).To(ContainSubstring("slicer slice-map: list NodeAccelerators"))
	})
})
