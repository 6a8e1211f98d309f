package webhook

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podWrapper builds test pods: makePod().Container("app", limits("nvidia.com/mig-1g.10gb", "1")).Obj().
type podWrapper struct{ corev1.Pod }

func makePod() *podWrapper {
	return &podWrapper{corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p"}}}
}

// res is a container's resources; nil maps stay nil.
type res struct{ limits, requests map[string]string }

func limits(kv ...string) res   { return res{limits: kvs(kv)} }
func requests(kv ...string) res { return res{requests: kvs(kv)} }

// both sets limits and requests to the same values, as apiserver defaulting does.
func both(kv ...string) res { return res{limits: kvs(kv), requests: kvs(kv)} }

func kvs(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func (r res) requirements() corev1.ResourceRequirements {
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

func (w *podWrapper) Container(name string, r res) *podWrapper {
	w.Spec.Containers = append(w.Spec.Containers, corev1.Container{Name: name, Image: "busybox", Resources: r.requirements()})
	return w
}

func (w *podWrapper) Init(name string, r res) *podWrapper {
	w.Spec.InitContainers = append(w.Spec.InitContainers, corev1.Container{Name: name, Image: "busybox", Resources: r.requirements()})
	return w
}

// Sidecar adds an init container with restartPolicy Always.
func (w *podWrapper) Sidecar(name string, r res) *podWrapper {
	always := corev1.ContainerRestartPolicyAlways
	w.Spec.InitContainers = append(w.Spec.InitContainers, corev1.Container{Name: name, Image: "busybox", Resources: r.requirements(), RestartPolicy: &always})
	return w
}

func (w *podWrapper) Ephemeral(name string, r res) *podWrapper {
	w.Spec.EphemeralContainers = append(w.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: "busybox", Resources: r.requirements()},
	})
	return w
}

func (w *podWrapper) Scheduler(name string) *podWrapper { w.Spec.SchedulerName = name; return w }
func (w *podWrapper) Node(name string) *podWrapper      { w.Spec.NodeName = name; return w }

func (w *podWrapper) Label(k, v string) *podWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}

func (w *podWrapper) Annotation(k, v string) *podWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
	return w
}

func (w *podWrapper) Obj() *corev1.Pod { return &w.Pod }
