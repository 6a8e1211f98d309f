package plugin

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/internal/podrequest"
)

// singleSlices remembers, per pod UID, whether the pod asks for exactly one MIG slice (the
// movability rule mig.PodMove's Slices; podrequest.ForPod says it). A search asks it of every
// running MIG pod of the cluster, and ForPod builds the pod's per-profile counts each time: at
// 5,000 nodes × 8 GPUs that was about half a search's CPU (BenchmarkDefragMemo's profile,
// docs/benchmarks.md). A pod's extended-resource requests never change (the API server refuses
// to resize them), so the answer holds for the pod's lifetime; the plugin drops it when the
// pod is deleted (forgetDeletedPod, through defragmenter.forget).
type singleSlices struct {
	mu     sync.Mutex
	single map[types.UID]bool
}

// of reports whether pod asks for exactly one MIG slice, from memory after the first answer.
func (s *singleSlices) of(pod *corev1.Pod) bool {
	s.mu.Lock()
	one, ok := s.single[pod.UID]
	s.mu.Unlock()
	if ok {
		return one
	}
	one = singleSlice(pod)
	if pod.UID == "" {
		return one // nothing to key it by
	}
	s.mu.Lock()
	if s.single == nil {
		s.single = map[types.UID]bool{}
	}
	s.single[pod.UID] = one
	s.mu.Unlock()
	return one
}

// forget drops the pod's answer.
func (s *singleSlices) forget(uid types.UID) {
	s.mu.Lock()
	delete(s.single, uid)
	s.mu.Unlock()
}

// singleSlice reports whether the pod asks for exactly one MIG slice.
func singleSlice(pod *corev1.Pod) bool {
	need, err := podrequest.ForPod(&pod.Spec)
	return err == nil && need.Slices() == 1
}
