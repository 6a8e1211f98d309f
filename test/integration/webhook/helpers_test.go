package webhook_test

import (
	"context"
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"

	"github.com/slicer-operator/slicer/test/builder"
)

var podSeq atomic.Int64

// makePod starts a pod with a fresh name in ns.
func makePod(ns string) *builder.PodBuilder {
	return builder.Pod(ns, fmt.Sprintf("p%d", podSeq.Add(1)))
}

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
