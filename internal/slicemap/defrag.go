package slicemap

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// addDefragmentationPlans sets Defragmentation on each pending pod from the latest
// DefragmentationPlanned Event about it (the same pod: name and UID), as the scheduler wrote
// it (scheduler/plugin/defrag.go); the map computes no plan of its own.
func addDefragmentationPlans(pods []PendingPod, in Input) {
	if len(in.Events) == 0 {
		return
	}
	uids := make(map[podKey]types.UID, len(in.Pods))
	for i := range in.Pods {
		uids[podKey{in.Pods[i].Namespace, in.Pods[i].Name}] = in.Pods[i].UID
	}
	latest := map[types.UID]*corev1.Event{}
	for i := range in.Events {
		e := &in.Events[i]
		o := e.InvolvedObject
		if o.Kind != "Pod" || o.UID == "" || uids[podKey{o.Namespace, o.Name}] != o.UID {
			continue
		}
		if cur := latest[o.UID]; cur == nil || lastSeen(e).After(lastSeen(cur)) {
			latest[o.UID] = e
		}
	}
	for i := range pods {
		pp := &pods[i]
		if e := latest[uids[podKey{pp.Namespace, pp.Name}]]; e != nil {
			pp.Defragmentation = e.Message + " (" + lastSeen(e).UTC().Format(time.RFC3339) + ")"
		}
	}
}

// lastSeen is when the Event last happened: its series' last observation, its last timestamp
// (core/v1 writers) or its event time (events.k8s.io writers such as kube-scheduler).
func lastSeen(e *corev1.Event) time.Time {
	t := e.EventTime.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if e.LastTimestamp.After(t) {
		t = e.LastTimestamp.Time
	}
	return t
}
