package plugin

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/internal/podrequest"
)

// podFacts remembers, per pod UID, two answers a defragmentation search asks of every running
// MIG pod of the cluster: whether the pod asks for exactly one MIG slice (the movability rule
// mig.PodMove's Slices; podrequest.ForPod says it) and the encoding of its node filters
// (destinationClassOf, the key of its destination class). At 5,000 nodes × 8 GPUs computing
// them afresh was most of a search's CPU (BenchmarkDefragMemo's profiles, docs/benchmarks.md).
// A pod's extended-resource requests never change (the API server refuses to resize them), so
// the first answer holds for the pod's lifetime. Its node filters can change (an update may add
// tolerations), so the class key is kept with the resourceVersion it was computed at and
// computed again at any other. The plugin drops a pod's facts when it is deleted
// (forgetDeletedPod, through defragmenter.forget).
type podFacts struct {
	mu    sync.Mutex
	facts map[types.UID]podFact
}

// podFact is what podFacts remembers of one pod.
type podFact struct {
	single bool
	// classKey is destinationClassOf at classVersion (the pod's resourceVersion); hasClass
	// says whether it was computed.
	classKey     string
	classVersion string
	hasClass     bool
}

// singleSlice reports whether pod asks for exactly one MIG slice, from memory after the first
// answer.
func (s *podFacts) singleSlice(pod *corev1.Pod) bool {
	if pod.UID == "" {
		return singleSlice(pod) // nothing to key it by
	}
	s.mu.Lock()
	f, ok := s.facts[pod.UID]
	s.mu.Unlock()
	if ok {
		return f.single
	}
	one := singleSlice(pod)
	s.mu.Lock()
	if s.facts == nil {
		s.facts = map[types.UID]podFact{}
	}
	f, ok = s.facts[pod.UID]
	if !ok {
		f = podFact{single: one}
	}
	f.single = one
	s.facts[pod.UID] = f
	s.mu.Unlock()
	return one
}

// classKey is destinationClassOf(pod), from memory while the pod's resourceVersion is the one
// it was computed at. Only a pod whose singleSlice was asked first is remembered (a search asks
// movability before a class), so the memo holds no pod the search never moves.
func (s *podFacts) classKey(pod *corev1.Pod) string {
	if pod.UID == "" {
		return destinationClassOf(pod) // nothing to key it by
	}
	s.mu.Lock()
	f, ok := s.facts[pod.UID]
	s.mu.Unlock()
	if ok && f.hasClass && f.classVersion == pod.ResourceVersion {
		return f.classKey
	}
	key := destinationClassOf(pod)
	if !ok {
		return key
	}
	s.mu.Lock()
	if f, ok = s.facts[pod.UID]; ok {
		f.classKey, f.classVersion, f.hasClass = key, pod.ResourceVersion, true
		s.facts[pod.UID] = f
	}
	s.mu.Unlock()
	return key
}

// forget drops the pod's facts.
func (s *podFacts) forget(uid types.UID) {
	s.mu.Lock()
	delete(s.facts, uid)
	s.mu.Unlock()
}

// singleSlice reports whether the pod asks for exactly one MIG slice.
func singleSlice(pod *corev1.Pod) bool {
	need, err := podrequest.ForPod(&pod.Spec)
	return err == nil && need.Slices() == 1
}
