package webhook_test

import (
	"context"
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var podSeq atomic.Int64

// podWrapper builds pods: makePod("team-a").Container("app", "nvidia.com/mig-1g.10gb", "1").Obj().
type podWrapper struct{ corev1.Pod }

func makePod(ns string) *podWrapper {
	return &podWrapper{corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: fmt.Sprintf("p%d", podSeq.Add(1)),
	}}}
}

func resources(kv []string) corev1.ResourceRequirements {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return corev1.ResourceRequirements{Limits: l}
}

// Container adds a container with these limits (the apiserver defaults requests to them).
func (w *podWrapper) Container(name string, limits ...string) *podWrapper {
	w.Spec.Containers = append(w.Spec.Containers, corev1.Container{Name: name, Image: "busybox", Resources: resources(limits)})
	return w
}

// Requests adds a container with these requests only.
func (w *podWrapper) Requests(name string, requests ...string) *podWrapper {
	r := resources(requests)
	w.Spec.Containers = append(w.Spec.Containers, corev1.Container{Name: name, Image: "busybox", Resources: corev1.ResourceRequirements{Requests: r.Limits}})
	return w
}

func (w *podWrapper) Init(name string, limits ...string) *podWrapper {
	w.Spec.InitContainers = append(w.Spec.InitContainers, corev1.Container{Name: name, Image: "busybox", Resources: resources(limits)})
	return w
}

func (w *podWrapper) Scheduler(s string) *podWrapper { w.Spec.SchedulerName = s; return w }
func (w *podWrapper) Node(n string) *podWrapper      { w.Spec.NodeName = n; return w }

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

// create creates the pod and returns it as stored.
func create(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	err := k8s.Create(ctx, p)
	return p, err
}

// resourceKeys lists the resource names of a container's limits and requests.
func resourceKeys(c corev1.Container) (limits, requests map[string]string) {
	limits, requests = map[string]string{}, map[string]string{}
	for k, v := range c.Resources.Limits {
		limits[string(k)] = v.String()
	}
	for k, v := range c.Resources.Requests {
		requests[string(k)] = v.String()
	}
	return limits, requests
}
