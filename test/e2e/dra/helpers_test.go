package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
)

const (
	node = "127.0.0.1"
	// where the emulated agent keeps its GPUs (operator/render: EmulatedStateDir) and where
	// containerd reads CDI specs on the local node (hack/local-cluster)
	emulatedStateFile = "/var/lib/slicer/emulated-gpus.json"
	cdiDir            = "/var/run/cdi"
	agentNamespace    = "slicer-system-agent"
)

// printDevice is what every container runs first: one line with the MIG device its CDI
// spec set (device-plugin/cdi), and NVIDIA_VISIBLE_DEVICES, which the claim's spec sets to
// all of the claim's MIG devices.
const printDevice = `echo "device=$SLICER_MIG_DEVICE profile=$SLICER_MIG_PROFILE placement=$SLICER_MIG_PLACEMENT gpu=$SLICER_GPU_UUID visible=$NVIDIA_VISIBLE_DEVICES"`

const waitForTerm = localnode.WaitForTerm

// bridgePod asks for one slice the way device-plugin users do, nvidia.com/mig-<profile>
// in limits: the extended-resource bridge of the profile's DeviceClass, no claim.
func bridgePod(ns, name, profile, script string) *corev1.Pod {
	return builder.Pod(ns, name).RestartNever().
		Container("main", builder.Limits(mig.NVIDIAResourcePrefix+profile, "1")).Shell(script).Obj()
}

// claimPod asks for one device through a ResourceClaim generated from the template.
func claimPod(ns, name, template, script string) *corev1.Pod {
	p := builder.Pod(ns, name).RestartNever().Container("main", builder.None).Shell(script).Obj()
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "mig", ResourceClaimTemplateName: &template}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "mig"}}
	return p
}

// claimTemplate requests one device of the profile's DeviceClass.
func claimTemplate(ns, name, profile string) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: migdra.ClassName(profile)}}},
		}}},
	}
}

func getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
	return &p, err
}

func waitPhase(ctx context.Context, ns string, phase corev1.PodPhase, names ...string) {
	for _, n := range names {
		Eventually(func() (corev1.PodPhase, error) {
			p, err := getPod(ctx, ns, n)
			return p.Status.Phase, err
		}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Equal(phase), "pod %s/%s", ns, n)
	}
}

// containerSaw returns the fields the pod's container printed (printDevice).
func containerSaw(ctx context.Context, ns, name string) (map[string]string, error) {
	raw, err := clientset.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("logs of %s/%s: %w", ns, name, err)
	}
	out, ok := localnode.PrintedFields(raw, "device")
	if !ok {
		return nil, fmt.Errorf("pod %s/%s has not printed yet: %q", ns, name, localnode.Tail(string(raw), 1))
	}
	return out, nil
}

// claimOfPod is the name of the pod's one ResourceClaim: the one the scheduler generated
// for its extended resources, or the one generated from its template.
func claimOfPod(p *corev1.Pod) string {
	if s := p.Status.ExtendedResourceClaimStatus; s != nil {
		return s.ResourceClaimName
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}

// device is a published MIG device of the node's pool, by its attributes.
type device struct {
	name, profile, gpu string
	placement          mig.Placement
}

// publishedDevices are the devices of the agent's ResourceSlices, by name.
func publishedDevices(ctx context.Context) (map[string]device, error) {
	var list resourceapi.ResourceSliceList
	if err := k8s.List(ctx, &list); err != nil {
		return nil, err
	}
	out := map[string]device{}
	for _, s := range list.Items {
		if s.Spec.Driver != migdra.DriverName || s.Spec.Pool.Name != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			a := d.Attributes
			str := func(k string) string {
				if v := a[resourceapi.QualifiedName(k)].StringValue; v != nil {
					return *v
				}
				return ""
			}
			num := func(k string) int {
				if v := a[resourceapi.QualifiedName(k)].IntValue; v != nil {
					return int(*v)
				}
				return -1
			}
			out[d.Name] = device{name: d.Name, profile: str(migdra.AttrProfile), gpu: str(migdra.AttrGPUUUID),
				placement: mig.Placement{Start: num(migdra.AttrPlacementStart), Size: num(migdra.AttrPlacementSize)}}
		}
	}
	return out, nil
}

// allocatedDevice is the one device of this driver the claim was allocated.
func allocatedDevice(c *resourceapi.ResourceClaim) (string, error) {
	if c.Status.Allocation == nil {
		return "", fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
	}
	var names []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == migdra.DriverName && r.Pool == node {
			names = append(names, r.Device)
		}
	}
	if len(names) != 1 {
		return "", fmt.Errorf("claim %s/%s holds %d devices of %s: %v", c.Namespace, c.Name, len(names), migdra.DriverName, names)
	}
	return names[0], nil
}

// expectPrepared checks the slice the running pod got end to end: its claim is allocated
// one published device of the profile; the emulated GPU has a MIG instance at exactly that
// device's GPU and placement; the claim's CDI spec names that instance; and the container's
// environment, set by the CDI spec, names it too.
func expectPrepared(ctx context.Context, ns, name, profile string) string {
	p, err := getPod(ctx, ns, name)
	Expect(err).NotTo(HaveOccurred())
	claimName := claimOfPod(p)
	Expect(claimName).NotTo(BeEmpty(), "pod %s has no ResourceClaim in its status", name)
	var c resourceapi.ResourceClaim
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimName}, &c)).To(Succeed())
	devName, err := allocatedDevice(&c)
	Expect(err).NotTo(HaveOccurred())
	devs, err := publishedDevices(ctx)
	Expect(err).NotTo(HaveOccurred())
	dev, ok := devs[devName]
	Expect(ok).To(BeTrue(), "claim %s holds %s, which the node's ResourceSlices do not list", claimName, devName)
	Expect(dev.profile).To(Equal(profile))

	insts, err := emulated.ReadStateFile(emulatedStateFile)
	Expect(err).NotTo(HaveOccurred())
	var migUUID string
	for _, in := range insts {
		if in.GPUUUID == dev.gpu && in.Placement == dev.placement && in.Profile == profile {
			Expect(in.MIGUUIDs).To(HaveLen(1), "instance at %s %+v", dev.gpu, dev.placement)
			migUUID = in.MIGUUIDs[0]
		}
	}
	Expect(migUUID).NotTo(BeEmpty(), "no %s instance at %s placement %+v on the emulated GPU", profile, dev.gpu, dev.placement)

	specs, ok, err := (&cdi.Writer{Dir: cdiDir}).ReadClaim(string(c.UID))
	Expect(err).NotTo(HaveOccurred())
	Expect(ok).To(BeTrue(), "no CDI spec for claim %s", claimName)
	Expect(specs).To(ConsistOf(HaveField("MIGUUID", migUUID)))

	var saw map[string]string
	Eventually(func() error {
		saw, err = containerSaw(ctx, ns, name)
		return err
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	Expect(saw).To(HaveKeyWithValue("device", migUUID), "pod %s", name)
	Expect(saw).To(HaveKeyWithValue("visible", migUUID), "pod %s", name)
	Expect(saw).To(HaveKeyWithValue("profile", profile), "pod %s", name)
	Expect(saw).To(HaveKeyWithValue("gpu", dev.gpu), "pod %s", name)
	Expect(saw).To(HaveKeyWithValue("placement", fmt.Sprintf("%d:%d", dev.placement.Start, dev.placement.Size)), "pod %s", name)

	// The agent reports the slice in the node's NodeAccelerator, held by the claim.
	Eventually(func(g Gomega) {
		var na slicerv1alpha1.NodeAccelerator
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, &na)).To(Succeed())
		var found *slicerv1alpha1.MIGSlice
		for _, gs := range na.Status.GPUs {
			for i, sl := range gs.Slices {
				if gs.UUID == dev.gpu && sl.MIGDeviceUUID == migUUID {
					found = &gs.Slices[i]
				}
			}
		}
		g.Expect(found).NotTo(BeNil(), "NodeAccelerator %s does not report %s on %s", node, migUUID, dev.gpu)
		g.Expect(found.State).To(Equal(slicerv1alpha1.SliceAllocated))
		g.Expect(found.Placement).To(Equal(migapi.APIPlacement(dev.placement)))
		g.Expect(found.Allocation).To(BeNil())
		g.Expect(found.Claim).To(Equal(&slicerv1alpha1.ClaimReference{Namespace: ns, Name: claimName, UID: string(c.UID), Device: devName}))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	return migUUID
}

// allocationsOverlap lists the allocated claims whose devices overlap on a GPU: what the
// counters in the ResourceSlices must make impossible.
func allocationsOverlap(ctx context.Context) ([]string, int, error) {
	var claims resourceapi.ResourceClaimList
	if err := k8s.List(ctx, &claims); err != nil {
		return nil, 0, err
	}
	devs, err := publishedDevices(ctx)
	if err != nil {
		return nil, 0, err
	}
	type held struct {
		claim string
		dev   device
	}
	var all []held
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Status.Allocation == nil {
			continue
		}
		name, err := allocatedDevice(c)
		if err != nil {
			return nil, 0, err
		}
		d, ok := devs[name]
		if !ok {
			return nil, 0, fmt.Errorf("claim %s/%s holds unpublished device %s", c.Namespace, c.Name, name)
		}
		all = append(all, held{c.Namespace + "/" + c.Name, d})
	}
	var bad []string
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.dev.gpu == b.dev.gpu && a.dev.placement.Start < b.dev.placement.Start+b.dev.placement.Size &&
				b.dev.placement.Start < a.dev.placement.Start+a.dev.placement.Size {
				bad = append(bad, fmt.Sprintf("%s (%s) and %s (%s)", a.claim, a.dev.name, b.claim, b.dev.name))
			}
		}
	}
	return bad, len(all), nil
}

// instancesOverlap lists overlapping MIG instances on the emulated GPUs.
func instancesOverlap() ([]string, int, error) {
	insts, err := emulated.ReadStateFile(emulatedStateFile)
	if err != nil {
		return nil, 0, err
	}
	var bad []string
	for i, a := range insts {
		for _, b := range insts[i+1:] {
			if a.GPUUUID == b.GPUUUID && a.Placement.Start < b.Placement.Start+b.Placement.Size && b.Placement.Start < a.Placement.Start+a.Placement.Size {
				bad = append(bad, fmt.Sprintf("%s: %s at %+v and %s at %+v", a.GPUUUID, a.Profile, a.Placement, b.Profile, b.Placement))
			}
		}
	}
	return bad, len(insts), nil
}

// expectNothingPrepared waits until no MIG instance, no claim CDI spec and no claim of the
// namespaces is left.
func expectNothingPrepared(ctx context.Context, namespaces ...string) {
	Eventually(func(g Gomega) {
		insts, err := emulated.ReadStateFile(emulatedStateFile)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(insts).To(BeEmpty(), "MIG instances left on the emulated GPUs")
		specs, err := (&cdi.Writer{Dir: cdiDir}).ListClaims()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(specs).To(BeEmpty(), "claim CDI specs left in %s", cdiDir)
		var claims resourceapi.ResourceClaimList
		g.Expect(k8s.List(ctx, &claims)).To(Succeed())
		for _, c := range claims.Items {
			g.Expect(slices.Contains(namespaces, c.Namespace)).To(BeFalse(), "claim %s/%s left", c.Namespace, c.Name)
		}
		var na slicerv1alpha1.NodeAccelerator
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, &na)).To(Succeed())
		for _, gs := range na.Status.GPUs {
			g.Expect(gs.Slices).To(BeEmpty(), "NodeAccelerator %s still reports slices on %s", node, gs.UUID)
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
}

// agentAwayLabel is a node label no node has: the agent DaemonSet selecting it runs nowhere.
const agentAwayLabel = "e2e.slicer.dev/agent-away"

// setAgentNodeSelector sets the agent DaemonSet's pod nodeSelector (nil removes it). The
// operator renders node affinity, not a nodeSelector, and applies only the fields it owns, so
// it neither reverts nor keeps this one.
func setAgentNodeSelector(ctx context.Context, sel map[string]string) {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"nodeSelector": sel}}}})
	Expect(err).NotTo(HaveOccurred())
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: render.AgentName}}
	Expect(k8s.Patch(ctx, ds, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("e2e-dra"))).To(Succeed())
}

// agentPods are the names of the agent's pods, terminating ones included.
func agentPods(ctx context.Context) ([]string, error) {
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(agentNamespace), client.MatchingLabels(render.AgentPodLabels())); err != nil {
		return nil, err
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names, nil
}

// downNodeSlice is a one-device ResourceSlice of driver for a node that does not run.
func downNodeSlice(nodeName, driver string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1},
			NodeName: &nodeName,
			Devices:  []resourceapi.Device{{Name: "gpu-0"}},
		},
	}
}

func createNamespace(ctx context.Context, name string) {
	localnode.CreateNamespace(ctx, k8s, clientset, name)
}

func deleteNamespace(ctx context.Context, name string) { localnode.DeleteNamespace(ctx, k8s, name) }
