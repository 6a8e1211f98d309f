package config

import (
	"sort"
	"strconv"
	"strings"
)

// FeatureGates are set on every Slicer scheduler: the binary gets them as --feature-gates
// (operator/render), an in-process scheduler from scheduler/server.Start.
//
// NominatedNodeNameForExpectation (beta, on by default from Kubernetes 1.35) makes
// kube-scheduler patch status.nominatedNodeName before every PreBind that has work, which is
// every MIG pod's: one more API write on the pod's path. The record is for other components:
// cluster autoscalers, which leave alone a pod whose PodScheduled is not False (ours is in its
// binding cycle), and other schedulers, whose nominators only track pods of their own
// profiles. Slicer's own scheduler keeps its placement in memory and, durably, in the
// SliceAllocation, which is what a restart rebuilds from (docs/design/handoff.md). So it
// runs with the gate off.
var FeatureGates = map[string]bool{"NominatedNodeNameForExpectation": false}

// FeatureGatesFlag is FeatureGates as the value of --feature-gates, sorted.
func FeatureGatesFlag() string {
	parts := make([]string, 0, len(FeatureGates))
	for k, v := range FeatureGates {
		parts = append(parts, k+"="+strconv.FormatBool(v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
