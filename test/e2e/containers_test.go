package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/podrequest"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/e2e/localnode"
	"github.com/slicer-operator/slicer/test/framework"
)

// printDevice is what every container of a containerPod runs first: one line with the MIG
// device it sees (containerSaw reads it). Init containers then end; the others wait.
const printDevice = `echo "visible=$NVIDIA_VISIBLE_DEVICES device=$SLICER_MIG_DEVICE profile=$SLICER_MIG_PROFILE placement=$SLICER_MIG_PLACEMENT gpu=$SLICER_GPU_UUID"`

const waitForTerm = localnode.WaitForTerm

// containerCase is a pod mixing init, sidecar and app containers that ask for slices, and the
// number of slices the kubelet hands its containers (podrequest.ForPod's rule).
type containerCase struct {
	name   string
	pod    func(ns, name string) *corev1.Pod
	slices int
}

func nvidia(profile string) builder.Res { return builder.Limits(mig.NVIDIAResourcePrefix+profile, "1") }

var containerCases = []containerCase{
	{name: "init-app", slices: 1, pod: func(ns, name string) *corev1.Pod {
		return builder.Pod(ns, name).RestartNever().
			Init("init", nvidia("1g.10gb")).Shell(printDevice).
			Container("app", nvidia("1g.10gb")).Shell(printDevice + waitForTerm).Obj()
	}},
	{name: "sidecar-app", slices: 2, pod: func(ns, name string) *corev1.Pod {
		return builder.Pod(ns, name).RestartNever().
			Sidecar("sidecar", nvidia("1g.10gb")).Shell(printDevice+waitForTerm).
			Container("app", nvidia("1g.10gb")).Shell(printDevice + waitForTerm).Obj()
	}},
	{name: "init-sidecar-app", slices: 2, pod: func(ns, name string) *corev1.Pod {
		return builder.Pod(ns, name).RestartNever().
			Init("init", nvidia("2g.20gb")).Shell(printDevice).
			Sidecar("sidecar", nvidia("2g.20gb")).Shell(printDevice+waitForTerm).
			Container("app", nvidia("2g.20gb")).Shell(printDevice + waitForTerm).Obj()
	}},
	{name: "init-of-another-profile", slices: 2, pod: func(ns, name string) *corev1.Pod {
		return builder.Pod(ns, name).RestartNever().
			Init("init", nvidia("3g.40gb")).Shell(printDevice).
			Container("app", nvidia("1g.10gb")).Shell(printDevice + waitForTerm).Obj()
	}},
}

// checkContainerCase checks one running pod of a containerCase: its SliceAllocations are the
// slices its containers saw, as many as ForPod counts, and the kubelet's PodResources lists the
// devices of its running containers (it leaves finished init containers out).
func checkContainerCase(ctx context.Context, ns string, tc containerCase) error {
	var pod corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.name}, &pod); err != nil {
		return err
	}
	need, err := podrequest.ForPod(&pod.Spec)
	if err != nil {
		return err
	}
	if need.Slices() != tc.slices {
		return fmt.Errorf("pod %s: ForPod counts %d slices, the case expects %d", tc.name, need.Slices(), tc.slices)
	}
	allocated := sets.New[string]()
	uuidOf := map[string]string{} // the kubelet's device ID (the slot's) → MIG UUID
	for _, a := range allocationsIn(ctx, ns) {
		if a.Spec.PodName == tc.name {
			allocated.Insert(a.Status.MIGDeviceUUID)
			uuidOf[framework.DeviceIDOf(&a)] = a.Status.MIGDeviceUUID
		}
	}
	if allocated.Len() != tc.slices || allocated.Has("") {
		return fmt.Errorf("pod %s: %d SliceAllocations (devices %v), want %d realized", tc.name, allocated.Len(), sets.List(allocated), tc.slices)
	}
	// seen: every container's device; running: those of the containers still running (sidecars
	// and app containers), which are the ones the kubelet's PodResources lists.
	seen, running := sets.New[string](), sets.New[string]()
	isInit := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		isInit[c.Name] = c.RestartPolicy == nil
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		saw, err := containerSaw(ctx, ns, tc.name, c.Name)
		if err != nil {
			return err
		}
		if saw["device"] == "" || saw["visible"] != saw["device"] {
			return fmt.Errorf("pod %s container %s: sees device %q, visible %q", tc.name, c.Name, saw["device"], saw["visible"])
		}
		seen.Insert(saw["device"])
		if !isInit[c.Name] {
			running.Insert(saw["device"])
		}
	}
	if !seen.Equal(allocated) {
		return fmt.Errorf("pod %s: containers saw %v, allocations hold %v (a slice no container received, or a device without allocation)",
			tc.name, sets.List(seen), sets.List(allocated))
	}
	v, err := readDeviceView(ctx)
	if err != nil {
		return err
	}
	var kubelet []string
	for id, holder := range v.assigned {
		if holder == ns+"/"+tc.name {
			kubelet = append(kubelet, uuidOf[id])
		}
	}
	if !sets.New(kubelet...).Equal(running) {
		return fmt.Errorf("pod %s: PodResources lists %v, its running containers see %v", tc.name, kubelet, sets.List(running))
	}
	return nil
}

// runContainerCases creates the containerCases (the largest first) and checks each.
func runContainerCases(ctx context.Context, ns string) {
	// The last case (a 3g.40gb and a 1g.10gb) first, then the others at once: a burst in any
	// order fits the two H100s, but the small pods placed around a slice the scheduler still
	// saw (a previous spec's, being released) can leave no 3g.40gb placement for good, all of
	// them being bare pods (seen once in CI).
	last := containerCases[len(containerCases)-1]
	createPod(ctx, last.pod(ns, last.name))
	waitRunning(ctx, ns, last.name)
	var names []string
	for _, tc := range containerCases[:len(containerCases)-1] {
		createPod(ctx, tc.pod(ns, tc.name))
		names = append(names, tc.name)
	}
	waitRunning(ctx, ns, names...)
	for _, tc := range containerCases {
		Eventually(checkContainerCase).WithContext(ctx).WithArguments(ns, tc).
			WithTimeout(30*time.Second).Should(Succeed(), "pod %s", tc.name)
	}
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}
