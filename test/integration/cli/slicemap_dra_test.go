package cli_test

import (
	"encoding/json"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/cmd/slicer/cli"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/internal/slicemap"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// mig3gClass and mig1gClass are DeviceClasses of the DRA frontend (not created: the slice map
// reads the class name the claim's request carries).
var mig3gClass, mig1gClass = migdra.ClassName("3g.40gb"), migdra.ClassName("1g.10gb")

// createClaim creates a ResourceClaim with one request for count devices of class, then, when
// devices are given, writes its allocation (Slicer's driver, node's pool) and reserves it for
// pod.
func createClaim(ns, name, class string, count int64, node string, devices []string, pod *corev1.Pod) *resourceapi.ResourceClaim {
	GinkgoHelper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
		}}}}}
	Expect(k8s.Create(ctx, c)).To(Succeed())
	if len(devices) == 0 {
		return c
	}
	var res []resourceapi.DeviceRequestAllocationResult
	for _, d := range devices {
		res = append(res, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: migdra.DriverName, Pool: node, Device: d})
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: res}}
	if pod != nil {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	}
	Expect(k8s.Status().Update(ctx, c)).To(Succeed())
	return c
}

var _ = Describe("slicer slice-map in DRA mode", Ordered, func() {
	const (
		ns      = "team-dra"
		node    = "cli-dra-node"
		migA    = "MIG-2c2c2c2c-0000-4000-8000-000000000000"
		dev3g   = "gpu-0-3g-40gb-at-0"
		dev1g   = "gpu-1-1g-10gb-at-6"
		message = "0/1 nodes are available: 1 cannot allocate all claims."
	)
	gpu0, gpu1 := framework.GPUUUID(node, 0), framework.GPUUUID(node, 1)
	var trainPod *corev1.Pod
	var trainClaim *resourceapi.ResourceClaim

	BeforeAll(func() {
		Expect(k8s.Create(ctx, framework.MakeNamespace(ns))).To(Succeed())

		// A pod holding a claim (named) whose 3g slice exists on GPU 0.
		trainPod = builder.Pod(ns, "train").Container("main", builder.Res{}).Node(node).Obj()
		trainPod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("train-gpu")}}
		Expect(k8s.Create(ctx, trainPod)).To(Succeed())
		setPodStatus(trainPod, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
		trainClaim = createClaim(ns, "train-gpu", mig3gClass, 1, node, []string{dev3g}, trainPod)
		// A claim allocated a 1g on GPU 1 whose slice the plugin has not made yet.
		createClaim(ns, "infer-gpu", mig1gClass, 1, node, []string{dev1g}, nil)

		// Pending: a bridge pod asking for a 7g (the stock scheduler's message), and a pod whose
		// claim template asks for two 1g (claim not generated yet).
		overflow := builder.Pod(ns, "overflow").Container("main", builder.Both("nvidia.com/mig-7g.80gb", "1")).Obj()
		Expect(k8s.Create(ctx, overflow)).To(Succeed())
		setPodStatus(overflow, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodPending
			s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: message}}
		})
		tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "two-1g"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: mig1gClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
			}}}}}}
		Expect(k8s.Create(ctx, tmpl)).To(Succeed())
		pair := builder.Pod(ns, "pair").Container("main", builder.Res{}).Obj()
		pair.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("two-1g")}}
		Expect(k8s.Create(ctx, pair)).To(Succeed())
		setPodStatus(pair, func(s *corev1.PodStatus) { s.Phase = corev1.PodPending })

		createNodeAccelerator(node, slicerv1alpha1.MIGSlice{
			Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 4}, GPUInstanceID: 2, ComputeInstanceID: 0,
			MIGDeviceUUID: migA, State: slicerv1alpha1.SliceAllocated,
			Claim: &slicerv1alpha1.ClaimReference{Namespace: ns, Name: "train-gpu", UID: string(trainClaim.UID), Device: dev3g}})
	})

	It("joins the slice with its claim and pod, and lists the claim not prepared", func() {
		code, stdout, stderr := runCLI("slice-map", "--kubeconfig", kubeconfig, "--node", node)
		Expect(code).To(Equal(cli.ExitOK), stderr)
		want := `NODE cli-dra-node  driver Ready 550.54.15
  GPU 0  H100-80GB  ` + gpu0 + `  MIG Enabled  Healthy  [a a a a|.|.|.|.]  4/8 free
    KEY  PLACEMENT  PROFILE  STATE      MIG DEVICE    GI  CI  HELD BY
    a    0+4        3g.40gb  Allocated  MIG-2c2c2c2c  2   0   claim team-dra/train-gpu → pod team-dra/train (Running)
  GPU 1  H100-80GB  ` + gpu1 + `  MIG Enabled  Healthy  [.|.|.|.|.|.|.|.]  8/8 free
  allocated, not prepared:
    CLAIM               GPU  PROFILE  PLACEMENT  DEVICE              PODS    PROBLEM
    team-dra/infer-gpu  1    1g.10gb  6+1        gpu-1-1g-10gb-at-6  no pod  -

PENDING PODS: none
`
		Expect(cmp.Diff(want, stdout)).To(BeEmpty())
	})

	It("explains the pending DRA pods from the GPUs", func() {
		code, stdout, stderr := runCLI("slice-map", "--kubeconfig", kubeconfig, "-o", "json")
		Expect(code).To(Equal(cli.ExitOK), stderr)
		var m slicemap.Map
		Expect(json.Unmarshal([]byte(stdout), &m)).To(Succeed())
		pending := map[string]slicemap.PendingPod{}
		for _, p := range m.PendingPods {
			if p.Namespace == ns {
				pending[p.Name] = p
			}
		}
		Expect(pending).To(HaveLen(2))
		Expect(pending["pair"].Requests).To(Equal([]slicemap.ResourceRequest{
			{Profile: "1g.10gb", Count: 2, DeviceClass: mig1gClass, ClaimTemplate: "two-1g", Request: "gpu"}}))
		overflow := pending["overflow"]
		Expect(overflow.Message).To(Equal(message))
		Expect(overflow.Requests).To(Equal([]slicemap.ResourceRequest{{Resource: "nvidia.com/mig-7g.80gb", Profile: "7g.80gb", Count: 1}}))
		Expect(overflow.Explanations).To(HaveLen(1))
		var verdicts []slicemap.GPUVerdict
		for _, v := range overflow.Explanations[0].GPUs {
			if v.Node == node {
				verdicts = append(verdicts, v)
			}
		}
		// GPU 1 is empty but for the claim allocated and not prepared: it counts.
		Expect(verdicts).To(Equal([]slicemap.GPUVerdict{
			{Node: node, Index: 0, Obstacle: "full", Reason: "only 4 compute slices free, 7g.80gb needs 7"},
			{Node: node, Index: 1, Obstacle: "full", Reason: "only 6 compute slices free, 7g.80gb needs 7"},
		}))

		_, text, _ := runCLI("slice-map", "--kubeconfig", kubeconfig)
		Expect(text).To(ContainSubstring("WHY PENDING"))
		Expect(text).To(ContainSubstring("team-dra/overflow  7g.80gb: none of"))
		Expect(text).To(MatchRegexp(`cli-dra-node GPU 1 +full +only 6 compute slices free, 7g.80gb needs 7`))
	})

	It("shows a claim deleted under its slice", func() {
		Expect(k8s.Delete(ctx, trainClaim)).To(Succeed())
		code, stdout, _ := runCLI("slice-map", "--kubeconfig", kubeconfig, "--node", node)
		Expect(code).To(Equal(cli.ExitOK))
		Expect(stdout).To(ContainSubstring("claim team-dra/train-gpu (not found)"))
	})
})
