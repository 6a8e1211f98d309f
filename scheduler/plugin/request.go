package plugin

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/slicer-operator/slicer/internal/mig"
)

// PodRequest returns the MIG slices a pod asks for: every slicer.dev/mig-<profile>
// resource in the limits (requests when a container has no limit for it) of
// every container, init containers included. Each container's slices are
// separate slices held for the pod's whole life: a slice asked for by an init
// container is not handed on to the app containers (simple and always
// correct; it may hold more slices than a restartable-init-aware sum would).
// It returns nil, nil for a pod that asks for no slice.
func PodRequest(pod *corev1.Pod) ([]mig.RequestItem, error) {
	counts := map[string]int{}
	add := func(cs []corev1.Container) error {
		for i := range cs {
			seen := map[corev1.ResourceName]bool{}
			for _, list := range []corev1.ResourceList{cs[i].Resources.Limits, cs[i].Resources.Requests} {
				for res, q := range list {
					if seen[res] || !strings.HasPrefix(string(res), mig.ResourcePrefix) {
						continue
					}
					seen[res] = true
					name, ok := mig.ProfileNameFromResource(string(res))
					if !ok {
						return fmt.Errorf("container %s asks for %s, which is not a known MIG profile", cs[i].Name, res)
					}
					v, ok := q.AsInt64()
					if !ok || v <= 0 || v > mig.MaxRequestSlices {
						return fmt.Errorf("container %s asks for %s of %s; it must be a whole number from 1 to %d",
							cs[i].Name, q.String(), res, mig.MaxRequestSlices)
					}
					counts[name] += int(v)
				}
			}
		}
		return nil
	}
	if err := add(pod.Spec.InitContainers); err != nil {
		return nil, err
	}
	if err := add(pod.Spec.Containers); err != nil {
		return nil, err
	}
	if len(counts) == 0 {
		return nil, nil
	}
	items := make([]mig.RequestItem, 0, len(counts))
	for name, n := range counts {
		items = append(items, mig.RequestItem{Profile: name, Count: n})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Profile < items[j].Profile })
	return items, nil
}

// hasMIGRequest is a cheap check used by queueing hints.
func hasMIGRequest(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			for _, list := range []corev1.ResourceList{cs[i].Resources.Limits, cs[i].Resources.Requests} {
				for res := range list {
					if strings.HasPrefix(string(res), mig.ResourcePrefix) {
						return true
					}
				}
			}
		}
	}
	return false
}

// describe is "1 × 3g.40gb, 2 × 1g.10gb" in Kubernetes spelling.
func describe(slices []string) string {
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
