// Package podrequest answers one question for every Slicer component: how many MIG slices of
// each profile does this pod need? The webhook, the scheduler plugin, the agent and
// `slicer slice-map` all call ForPod, so they cannot disagree (docs/design/pod-requests.md).
// WholeGPUs answers the same question for whole GPUs (nvidia.com/gpu) by the same rules.
//
// The answer is the number of distinct devices the kubelet's device manager hands the pod's
// containers, because that is what the node must hold. The rules, read from the device manager
// of the Kubernetes release this module builds against (k8s.io/kubernetes
// pkg/kubelet/cm/devicemanager/manager.go: ManagerImpl.Allocate, devicesToAllocate and
// allocateContainerResources; pod_devices.go: addContainerAllocatedResources and
// removeContainerAllocatedResources):
//
//   - A container's need for a device-plugin resource is its limit (Resources.Limits); the API
//     server makes requests equal limits for extended resources. ForPod reads the request when
//     a container has no limit, for pods not yet defaulted (the webhook sees those).
//   - The kubelet allocates the init containers in order, then the app containers. Each
//     container first takes devices from the pod's reuse pool, then free devices.
//   - A regular init container adds all its devices to the pool when it is allocated: it has
//     finished before the next container starts, so they are reused.
//   - A sidecar (an init container with restartPolicy Always) and an app container remove the
//     devices they took from the pool: they keep them while later containers run.
//   - Ephemeral containers cannot have resources and get no device.
package podrequest

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Need is what a pod needs: the distinct slices per profile (Items, sorted by profile) and how
// each container that asks for slices gets them, in the kubelet's allocation order.
type Need struct {
	Items      []mig.RequestItem
	Containers []ContainerNeed
}

// Slices is the total number of distinct slices the pod holds.
func (n Need) Slices() int {
	total := 0
	for _, it := range n.Items {
		total += it.Count
	}
	return total
}

// Count is the number of distinct slices of a profile (NVIDIA spelling) the pod holds.
func (n Need) Count(profile string) int {
	for _, it := range n.Items {
		if it.Profile == profile {
			return it.Count
		}
	}
	return 0
}

// Describe is "1 × 3g.40gb, 2 × 1g.10gb" (Kubernetes spelling, largest profile first as
// mig.Request orders them), the phrase every message about a pod's slices uses.
func (n Need) Describe() string { return DescribeSlices(n.slices()) }

func (n Need) slices() []string {
	var names []string
	for _, it := range n.Items {
		for i := 0; i < it.Count; i++ {
			names = append(names, it.Profile)
		}
	}
	return mig.SortSlices(names)
}

// ContainerNeed is one container's share: per profile, how many devices it receives, and how
// many of those are new to the pod (the rest are reused from finished init containers).
type ContainerNeed struct {
	Name string
	Kind Kind
	// Uses maps profile (NVIDIA spelling) to the container's devices of it.
	Uses map[string]Use
}

// Use is a container's devices of one profile.
type Use struct {
	Total int // devices the container receives (its limit)
	New   int // of those, devices no earlier container of the pod held
}

// Kind is how the kubelet treats a container's devices.
type Kind int

const (
	Init    Kind = iota // regular init container: its devices go back to the pod's pool
	Sidecar             // init container with restartPolicy Always: keeps its devices
	App                 // app container: keeps its devices
)

func (k Kind) String() string {
	switch k {
	case Init:
		return "init container"
	case Sidecar:
		return "sidecar container"
	default:
		return "container"
	}
}

// ForPod returns the slices a pod needs, or an error a user can act on when a container's
// value is not a whole number from 1 to mig.MaxRequestSlices or the pod as a whole needs more
// than mig.MaxRequestSlices slices at once. It reads only Slicer's resources (mig.ResourcePrefix);
// a pod that asks for none gets a zero Need and no error.
func ForPod(spec *corev1.PodSpec) (Need, error) { return forPod(spec, mig.ResourcePrefix) }

// ForNVIDIAResources is ForPod for the NVIDIA spelling of the resources (nvidia.com/mig-*,
// mig.NVIDIAResourcePrefix), which pods keep in DRA mode: the stock scheduler's
// extended-resource bridge turns them into one claim with a device request per container
// (k8s.io/kubernetes pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go,
// createRequestsAndMappings). Its rule is spelled differently (sidecar and app containers
// request all they use, a regular init container only what the long-lived containers after it
// do not already request, and the largest such init request counts) but gives the same total
// per profile as the device manager's; the totals agreed on 200,000 random mixes of init,
// sidecar and app containers of up to 3 slices each.
func ForNVIDIAResources(spec *corev1.PodSpec) (Need, error) {
	return forPod(spec, mig.NVIDIAResourcePrefix)
}

func forPod(spec *corev1.PodSpec, prefix string) (Need, error) {
	var need Need
	held, containers, err := distinctDevices(spec, func(c *corev1.Container) (map[string]int, error) {
		return containerCounts(c, prefix)
	})
	if err != nil {
		return Need{}, err
	}
	need.Containers = containers
	for profile, n := range held {
		need.Items = append(need.Items, mig.RequestItem{Profile: profile, Count: n})
	}
	sort.Slice(need.Items, func(i, j int) bool { return need.Items[i].Profile < need.Items[j].Profile })
	if total := need.Slices(); total > mig.MaxRequestSlices {
		return Need{}, fmt.Errorf("the pod needs %d MIG slices at once (%s); at most %d fit one pod",
			total, need.Describe(), mig.MaxRequestSlices)
	}
	return need, nil
}

// distinctDevices applies the device manager's rules (the package comment) to the devices
// each container receives, as counts reads them (kind → count; a slice's kind is its
// profile), and returns the distinct devices the pod holds per kind and each container's
// share, in allocation order. It is the one implementation of the rule: ForPod and WholeGPUs
// differ only in what they count.
func distinctDevices(spec *corev1.PodSpec, counts func(*corev1.Container) (map[string]int, error)) (map[string]int, []ContainerNeed, error) {
	var containers []ContainerNeed
	pool := map[string]int{} // kind → devices in the pod's reuse pool
	held := map[string]int{} // kind → distinct devices so far
	visit := func(c *corev1.Container, kind Kind) error {
		n, err := counts(c)
		if err != nil || len(n) == 0 {
			return err
		}
		cn := ContainerNeed{Name: c.Name, Kind: kind, Uses: map[string]Use{}}
		for device, total := range n {
			reused := min(total, pool[device])
			fresh := total - reused
			held[device] += fresh
			cn.Uses[device] = Use{Total: total, New: fresh}
			if kind == Init {
				// The pool becomes the union of itself and this container's devices.
				pool[device] += fresh
			} else {
				pool[device] -= reused
			}
		}
		containers = append(containers, cn)
		return nil
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		kind := Init
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			kind = Sidecar
		}
		if err := visit(c, kind); err != nil {
			return nil, nil, err
		}
	}
	for i := range spec.Containers {
		if err := visit(&spec.Containers[i], App); err != nil {
			return nil, nil, err
		}
	}
	return held, containers, nil
}

// containerCounts returns a container's slices per profile (NVIDIA spelling), read from the
// resources named with prefix.
func containerCounts(c *corev1.Container, prefix string) (map[string]int, error) {
	var counts map[string]int
	for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for res, q := range list {
			if !strings.HasPrefix(string(res), prefix) {
				continue
			}
			profile, ok := mig.ProfileNameFromResource(string(res))
			if !ok {
				return nil, fmt.Errorf("container %q asks for %s, which is not a MIG profile of any supported GPU; known: %s",
					c.Name, res, strings.Join(mig.KnownProfileNames(), ", "))
			}
			if _, done := counts[profile]; done {
				continue // the limit counts; a request without a limit counts only alone
			}
			n, err := Count(c.Name, res, q)
			if err != nil {
				return nil, err
			}
			if counts == nil {
				counts = map[string]int{}
			}
			counts[profile] = n
		}
	}
	return counts, nil
}

// Count validates one container's value of one MIG resource: a whole number of slices from 1
// to mig.MaxRequestSlices. The webhook calls it for each container, ForPod for every one.
func Count(container string, res corev1.ResourceName, q resource.Quantity) (int, error) {
	return count(container, res, q, mig.MaxRequestSlices, "MIG slices",
		fmt.Sprintf("at most %d MIG slices fit one pod", mig.MaxRequestSlices))
}

// count validates one container's value of a device resource: a whole number of devices (the
// noun) from 1 to limit; over says why no more than limit.
func count(container string, res corev1.ResourceName, q resource.Quantity, limit int, noun, over string) (int, error) {
	if q.Cmp(*resource.NewQuantity(int64(limit), resource.DecimalSI)) > 0 {
		return 0, fmt.Errorf("container %q: %s is %s, but %s", container, res, q.String(), over)
	}
	milli := q.MilliValue() // bounded by the check above; rounds up, hence the last test
	if milli <= 0 || milli%1000 != 0 || q.Cmp(*resource.NewQuantity(milli/1000, resource.DecimalSI)) != 0 {
		return 0, fmt.Errorf("container %q: %s is %s, but the number of %s must be a positive integer",
			container, res, q.String(), noun)
	}
	return int(milli / 1000), nil
}

// Mentions reports whether any container or init container names a Slicer MIG resource, valid
// or not: the cheap test the scheduler's queueing hints use before calling ForPod.
func Mentions(spec *corev1.PodSpec) bool { return mentions(spec, mig.ResourcePrefix) }

// MentionsNVIDIA is Mentions for the NVIDIA spelling (nvidia.com/mig-*).
func MentionsNVIDIA(spec *corev1.PodSpec) bool { return mentions(spec, mig.NVIDIAResourcePrefix) }

func mentions(spec *corev1.PodSpec, prefix string) bool {
	return mentionsResource(spec, func(res corev1.ResourceName) bool { return strings.HasPrefix(string(res), prefix) })
}

// mentionsResource reports whether any container or init container names a resource match
// accepts, in its limits or requests.
func mentionsResource(spec *corev1.PodSpec, match func(corev1.ResourceName) bool) bool {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			if firstResource(&cs[i], match) != "" {
				return true
			}
		}
	}
	return false
}

// firstResource is the first resource (in name order) of a container's limits and requests
// that match accepts, or "".
func firstResource(c *corev1.Container, match func(corev1.ResourceName) bool) corev1.ResourceName {
	var first corev1.ResourceName
	for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for res := range list {
			if match(res) && (first == "" || res < first) {
				first = res
			}
		}
	}
	return first
}

// DescribeSlices is "1 × 3g.40gb, 2 × 1g.10gb" for profile names (NVIDIA spelling) in the
// order given, runs of one profile counted together, in Kubernetes spelling.
func DescribeSlices(slices []string) string {
	var b strings.Builder
	for i := 0; i < len(slices); {
		j := i
		for j < len(slices) && slices[j] == slices[i] {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d × %s", j-i, mig.LegalProfileName(slices[i]))
		i = j
	}
	return b.String()
}
