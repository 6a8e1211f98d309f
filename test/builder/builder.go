// Package builder builds the pods and nodes of Slicer's unit, integration and e2e tests with
// one chainable vocabulary:
//
//	builder.Pod("team-a", "train").
//		Init("fetch", builder.Limits("nvidia.com/mig-1g.10gb", "1")).
//		Sidecar("proxy", builder.Limits("slicer.dev/mig-1g.10gb", "1")).
//		Container("app", builder.Both("slicer.dev/mig-3g.40gb", "1")).Obj()
//
// Resource values are Kubernetes quantities as strings; a map left out stays nil, as in an
// object a user wrote.
package builder

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Res is a container's resources.
type Res struct{ limits, requests map[string]string }

// Limits sets limits only: name, value, name, value, ...
func Limits(kv ...string) Res { return Res{limits: pairs(kv)} }

// Requests sets requests only.
func Requests(kv ...string) Res { return Res{requests: pairs(kv)} }

// Both sets limits and requests to the same values, as the API server defaults extended
// resources.
func Both(kv ...string) Res { return Res{limits: pairs(kv), requests: pairs(kv)} }

// AndRequests adds requests to resources that have limits: Limits(...).AndRequests(...).
func (r Res) AndRequests(kv ...string) Res { r.requests = pairs(kv); return r }

// None is a container without resources.
var None = Res{}

// with sets m[k] = v, making m when it is nil.
func with(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

func pairs(kv []string) map[string]string {
	if len(kv)%2 != 0 {
		panic("builder: resources come in name, value pairs")
	}
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// Requirements returns the resources as a ResourceRequirements.
func (r Res) Requirements() corev1.ResourceRequirements {
	conv := func(m map[string]string) corev1.ResourceList {
		if m == nil {
			return nil
		}
		l := corev1.ResourceList{}
		for k, v := range m {
			l[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		return l
	}
	return corev1.ResourceRequirements{Limits: conv(r.limits), Requests: conv(r.requests)}
}

// PodBuilder builds a pod; every method returns the builder.
type PodBuilder struct {
	pod  corev1.Pod
	last *corev1.Container // the container the next Command applies to
}

// Pod starts a pod with no containers. The image of every container is DefaultImage.
func Pod(namespace, name string) *PodBuilder {
	return &PodBuilder{pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}
}

// DefaultImage is the image every container gets; the local node imports it (hack/local-cluster).
const DefaultImage = "localhost/busybox:local"

func container(name string, r Res) corev1.Container {
	return corev1.Container{Name: name, Image: DefaultImage, ImagePullPolicy: corev1.PullNever, Resources: r.Requirements()}
}

// Container adds an app container.
func (b *PodBuilder) Container(name string, r Res) *PodBuilder {
	b.pod.Spec.Containers = append(b.pod.Spec.Containers, container(name, r))
	b.last = &b.pod.Spec.Containers[len(b.pod.Spec.Containers)-1]
	return b
}

// Init adds a regular init container.
func (b *PodBuilder) Init(name string, r Res) *PodBuilder {
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, container(name, r))
	b.last = &b.pod.Spec.InitContainers[len(b.pod.Spec.InitContainers)-1]
	return b
}

// Sidecar adds an init container with restartPolicy Always.
func (b *PodBuilder) Sidecar(name string, r Res) *PodBuilder {
	always := corev1.ContainerRestartPolicyAlways
	c := container(name, r)
	c.RestartPolicy = &always
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, c)
	b.last = &b.pod.Spec.InitContainers[len(b.pod.Spec.InitContainers)-1]
	return b
}

// Ephemeral adds an ephemeral container.
func (b *PodBuilder) Ephemeral(name string, r Res) *PodBuilder {
	b.pod.Spec.EphemeralContainers = append(b.pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: DefaultImage, Resources: r.Requirements()},
	})
	b.last = nil
	return b
}

// Command sets the command of the container added last.
func (b *PodBuilder) Command(cmd ...string) *PodBuilder {
	if b.last == nil {
		panic("builder: Command needs a container added before it")
	}
	b.last.Command = cmd
	return b
}

// Shell sets the command of the container added last to /bin/sh -c script.
func (b *PodBuilder) Shell(script string) *PodBuilder { return b.Command("/bin/sh", "-c", script) }

// UID sets the pod's UID.
func (b *PodBuilder) UID(uid string) *PodBuilder { b.pod.UID = types.UID(uid); return b }

// Scheduler sets spec.schedulerName.
func (b *PodBuilder) Scheduler(name string) *PodBuilder { b.pod.Spec.SchedulerName = name; return b }

// Node sets spec.nodeName.
func (b *PodBuilder) Node(name string) *PodBuilder { b.pod.Spec.NodeName = name; return b }

// NodeSelector adds a nodeSelector term.
func (b *PodBuilder) NodeSelector(k, v string) *PodBuilder {
	if b.pod.Spec.NodeSelector == nil {
		b.pod.Spec.NodeSelector = map[string]string{}
	}
	b.pod.Spec.NodeSelector[k] = v
	return b
}

// RestartNever sets restartPolicy Never and a 1 s grace period, for pods that run once.
func (b *PodBuilder) RestartNever() *PodBuilder {
	b.pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	grace := int64(1)
	b.pod.Spec.TerminationGracePeriodSeconds = &grace
	return b
}

// Label sets a label.
func (b *PodBuilder) Label(k, v string) *PodBuilder {
	b.pod.Labels = with(b.pod.Labels, k, v)
	return b
}

// Annotation sets an annotation.
func (b *PodBuilder) Annotation(k, v string) *PodBuilder {
	b.pod.Annotations = with(b.pod.Annotations, k, v)
	return b
}

// Phase sets status.phase.
func (b *PodBuilder) Phase(p corev1.PodPhase) *PodBuilder { b.pod.Status.Phase = p; return b }

// Obj returns the pod (a copy: the builder can go on).
func (b *PodBuilder) Obj() *corev1.Pod { return b.pod.DeepCopy() }

// NodeBuilder builds a node.
type NodeBuilder struct{ node corev1.Node }

// Node starts a node.
func Node(name string) *NodeBuilder {
	return &NodeBuilder{node: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// Label sets a label.
func (b *NodeBuilder) Label(k, v string) *NodeBuilder {
	b.node.Labels = with(b.node.Labels, k, v)
	return b
}

// Labels sets labels (added to those already set).
func (b *NodeBuilder) Labels(labels map[string]string) *NodeBuilder {
	for k, v := range labels {
		b.Label(k, v)
	}
	return b
}

// Ready makes the node Ready (its kubelet's condition) with room for ordinary pods: 64 CPUs,
// 256 GiB, 110 pods, in capacity and allocatable.
func (b *NodeBuilder) Ready() *NodeBuilder {
	b.Capacity(string(corev1.ResourceCPU), "64", string(corev1.ResourceMemory), "256Gi", string(corev1.ResourcePods), "110")
	now := metav1.Now()
	b.node.Status.Conditions = append(b.node.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now})
	return b
}

// Capacity sets capacity and allocatable: name, value, ...
func (b *NodeBuilder) Capacity(kv ...string) *NodeBuilder {
	if b.node.Status.Capacity == nil {
		b.node.Status.Capacity, b.node.Status.Allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	}
	for k, v := range pairs(kv) {
		b.node.Status.Capacity[corev1.ResourceName(k)] = resource.MustParse(v)
		b.node.Status.Allocatable[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return b
}

// Obj returns the node (a copy).
func (b *NodeBuilder) Obj() *corev1.Node { return b.node.DeepCopy() }
