package driverupgrade

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Migrating reports whether the decision gives nodes KMM loaded before the Module had a
// version their version labels: the Module must keep no version until those are written.
func (d Decision) Migrating() bool {
	for _, n := range d.Nodes {
		if n.Want.WorkerVersion != "" {
			return true
		}
	}
	return false
}

// Condition is ConditionDriverUpgraded of the decision: True once every managed node runs
// the target, else False naming the nodes under way (DriverUpgrading), the ones it stopped
// on (DriverUpgradeStalled), or that the rollout is paused with nodes left.
func (d Decision) Condition(target string, p Policy) (metav1.ConditionStatus, string, string) {
	counts := fmt.Sprintf("%d of %d nodes run driver version %s", d.Updated, d.Updated+d.Outdated+len(d.InProgress), target)
	if d.Done() {
		return metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, counts
	}
	var stalled, moving []string
	for _, n := range d.InProgress {
		line := fmt.Sprintf("node %s (%s): %s", n.Node, n.Want.Step, n.Message)
		if n.Stalled {
			stalled = append(stalled, line)
		} else {
			moving = append(moving, line)
		}
	}
	switch {
	case len(stalled) > 0:
		return metav1.ConditionFalse, slicerv1alpha1.ReasonDriverUpgradeStalled,
			"the rollout stopped: " + strings.Join(stalled, "; ") + joinNonEmpty("; under way: ", moving) + "; " + counts
	case len(moving) > 0:
		return metav1.ConditionFalse, slicerv1alpha1.ReasonDriverUpgrading, strings.Join(moving, "; ") + "; " + counts
	case p.Paused:
		return metav1.ConditionFalse, slicerv1alpha1.ReasonDriverUpgradePaused,
			fmt.Sprintf("spec.driver.upgrade.state is Paused with %d nodes left; %s", d.Outdated, counts)
	default:
		// Outdated nodes that cannot start now: cordoned or down (the platform's).
		return metav1.ConditionFalse, slicerv1alpha1.ReasonDriverUpgrading,
			fmt.Sprintf("%d nodes wait: not ready or cordoned, they start once available; %s", d.Outdated, counts)
	}
}

func joinNonEmpty(prefix string, parts []string) string {
	if len(parts) == 0 {
		return ""
	}
	return prefix + strings.Join(parts, "; ")
}

// Status is the Slicer's status.driverUpgrade of the decision.
func (d Decision) Status(target string) *slicerv1alpha1.DriverUpgradeStatus {
	st := &slicerv1alpha1.DriverUpgradeStatus{TargetVersion: target, UpdatedNodes: int32(d.Updated), OutdatedNodes: int32(d.Outdated)}
	for i, n := range d.InProgress {
		if i == 100 { // the CRD's bound; maxUnavailable is at most 100
			break
		}
		msg := n.Message
		if len(msg) > 512 {
			msg = msg[:512]
		}
		st.Nodes = append(st.Nodes, slicerv1alpha1.NodeDriverUpgrade{Name: n.Node, Step: n.Want.Step, Since: metav1.NewTime(n.Want.Since), Message: msg})
	}
	return st
}
