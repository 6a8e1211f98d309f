// Package driverupgrade decides a rolling driver upgrade through KMM's ordered upgrade
// (docs/driver-upgrade.md): which node goes next, when a node's step is done, what a stall
// looks like. It is pure: the decision is a function of what the API shows (node labels and
// annotations, the pods holding slices, the agent's pods, KMM's worker pods) and of the
// time, so a restarted operator resumes where the labels say. operator/controller observes,
// calls Decide and writes.
package driverupgrade

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Policy is the spec's rollout settings (spec.driver.upgrade), defaults applied.
type Policy struct {
	MaxUnavailable int
	DrainTimeout   time.Duration
	// Force: past the drain timeout, delete the pods left (drainTimeoutPolicy Force).
	Force       bool
	LoadTimeout time.Duration
	Paused      bool
}

// PolicyOf reads spec.driver.upgrade, with the CRD's defaults for zero values.
func PolicyOf(s slicerv1alpha1.DriverUpgradeSpec) Policy {
	p := Policy{
		MaxUnavailable: int(s.MaxUnavailable),
		DrainTimeout:   time.Duration(s.DrainTimeoutSeconds) * time.Second,
		Force:          s.DrainTimeoutPolicy == slicerv1alpha1.DrainTimeoutForce,
		LoadTimeout:    time.Duration(s.LoadTimeoutSeconds) * time.Second,
		Paused:         s.State == slicerv1alpha1.DriverUpgradePaused,
	}
	if p.MaxUnavailable < 1 {
		p.MaxUnavailable = 1
	}
	if p.DrainTimeout <= 0 {
		p.DrainTimeout = 600 * time.Second
	}
	if p.LoadTimeout <= 0 {
		p.LoadTimeout = 900 * time.Second
	}
	return p
}

// Pod is a pod that holds MIG slices on a node.
type Pod struct {
	types.NamespacedName
	UID types.UID
	// Deleting: the pod is terminating (evicted, deleted): nothing more to do but wait.
	Deleting bool
	// Bare: no controller owns the pod. Nothing would recreate it, so it is not evicted
	// (kubectl drain refuses such pods too): it blocks the drain until it ends, is deleted,
	// or the drain timeout's Force deletes it.
	Bare bool
}

// Agent is the state of the agent's pod on a node.
type Agent int

const (
	// AgentNone: no agent pod on the node.
	AgentNone Agent = iota
	// AgentStarting: a pod that is not ready (or terminating).
	AgentStarting
	// AgentReady: a ready pod, not terminating.
	AgentReady
)

// Node is what the API shows of one node.
type Node struct {
	Name string
	// Managed: Slicer manages the node (slicer.dev/mig-capable=true, the Module's selector).
	Managed bool
	// Available: Ready and schedulable. A node the platform cordoned or that is down (a
	// kernel upgrade's drain and reboot) is not started: the platform is draining it.
	Available bool
	// Step and Since: the node's upgrade step (LabelDriverUpgrade, "" for none) and when it
	// began (AnnotationDriverUpgradeSince; zero when absent or malformed).
	Step  slicerv1alpha1.DriverUpgradeStep
	Since time.Time
	// ModuleVersion is the version the node's module-version label asks KMM for ("" none);
	// WorkerVersion the version KMM runs there (its worker-pod label); Loaded: KMM's ready
	// label (its worker last succeeded with what the node's config asks).
	ModuleVersion, WorkerVersion string
	Loaded                       bool
	// Holders are the pods that hold slices on the node; Releasing counts the slices whose
	// pods are gone and which the agent (or the kubelet, DRA) is still releasing.
	Holders   []Pod
	Releasing int
	Agent     Agent
	// WorkerFailure says why KMM's worker pod on the node fails ("" when it does not).
	WorkerFailure string
}

// Facts are the inputs of one decision.
type Facts struct {
	// Target is the version the spec asks for (the Module's version).
	Target string
	// Migrate is the version to give the nodes KMM loaded before the Module had a version
	// (an install from before ordered upgrades): "" when the live Module has one already.
	Migrate string
	Policy  Policy
	Nodes   []Node
	Now     time.Time
}

// Want is what a node's labels and annotation should say.
type Want struct {
	Step          slicerv1alpha1.DriverUpgradeStep
	Since         time.Time
	ModuleVersion string
	// WorkerVersion, when set, is written as KMM's worker-pod label (migration only).
	WorkerVersion string
}

// NodeDecision is what to write for one node, and why.
type NodeDecision struct {
	Node string
	Want Want
	// Evict are the holders to evict (Eviction API, UID precondition); Delete those to delete
	// (drain timeout with Force).
	Evict, Delete []Pod
	// Message says what the node waits for (status), Stalled whether the rollout stops on it.
	Message string
	Stalled bool
}

// Decision is the outcome.
type Decision struct {
	// Nodes are the decisions of the managed nodes and of the unmanaged ones that carry a
	// step, sorted by name. A Want equal to what the node shows needs no write.
	Nodes []NodeDecision
	// Updated, Outdated: managed nodes not under way at the target, and at another version.
	Updated, Outdated int
	// InProgress are the nodes under way after this decision, by name.
	InProgress []NodeDecision
	// Stalled: the rollout stops (no node starts) on the nodes whose decision says so.
	Stalled bool
	// Versions counts managed nodes by the version they ask KMM for ("" none yet).
	Versions map[string]int
}

// Done reports whether every managed node runs the target and none is under way.
func (d Decision) Done() bool { return d.Outdated == 0 && len(d.InProgress) == 0 }

// Decide is the rollout's decision (docs/driver-upgrade.md, "Steps"):
//
//   - a node with no version label gets one: the version it already runs when KMM loaded it
//     before the Module had a version (migration), the target otherwise (a new node, which
//     runs nothing yet);
//   - Drain: evict the node's MIG pods that a controller owns (a bare pod is left: nothing
//     would recreate it); past the drain timeout, delete them all (Force) or stall (Wait);
//     done when no pod holds a slice there and every slice is released;
//   - Driver: once the agent is off the node, ask KMM for the target; done when KMM runs it
//     (worker label at the target) and the ready label is back; stalled past the load timeout
//     or while KMM's worker fails;
//   - Verify: done when the agent is ready again; the node is then fenced no more;
//   - a node under way whose label already asks for the target (the spec rolled back) is
//     done at Drain, and one that no longer does (the spec changed again) drains again;
//   - nodes start, while nothing is stalled and the rollout is not paused, up to
//     maxUnavailable under way, in name order among the available outdated nodes, those
//     without MIG pods first.
func Decide(f Facts) Decision {
	// Step times are stored to the second (RFC 3339): a decision's are too, so that deciding
	// again from what was written decides the same.
	f.Now = f.Now.Truncate(time.Second)
	nodes := append([]Node(nil), f.Nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	d := Decision{Versions: map[string]int{}}
	var candidates []int
	for i := range nodes {
		n := &nodes[i]
		if n.Managed {
			d.Versions[n.ModuleVersion]++
		}
		nd := decideNode(f, n)
		if nd == nil {
			if n.Managed && n.Step == "" && n.ModuleVersion != "" {
				if n.ModuleVersion == f.Target {
					d.Updated++
				} else {
					d.Outdated++
					if n.Available {
						candidates = append(candidates, len(d.Nodes))
					}
				}
			}
			d.Nodes = append(d.Nodes, NodeDecision{Node: n.Name, Want: current(n)})
			continue
		}
		d.Nodes = append(d.Nodes, *nd)
		switch {
		case nd.Want.Step != "":
			d.InProgress = append(d.InProgress, *nd)
			d.Stalled = d.Stalled || nd.Stalled
		case !n.Managed:
		case nd.Want.ModuleVersion == f.Target:
			d.Updated++
		default:
			// Migrated to the version it runs: a candidate from the next decision on.
			d.Outdated++
		}
	}
	slots := f.Policy.MaxUnavailable - len(d.InProgress)
	if d.Stalled || f.Policy.Paused || slots <= 0 {
		return d
	}
	// Nodes without MIG pods cost nothing to drain: they go first.
	byName := map[string]*Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	sort.SliceStable(candidates, func(a, b int) bool {
		return len(byName[d.Nodes[candidates[a]].Node].Holders) == 0 && len(byName[d.Nodes[candidates[b]].Node].Holders) > 0
	})
	for _, c := range candidates {
		if slots == 0 {
			break
		}
		nd := &d.Nodes[c]
		nd.Want.Step, nd.Want.Since = slicerv1alpha1.DriverUpgradeDrain, f.Now
		nd.Message = "draining: the node takes no new MIG pod"
		d.Outdated--
		d.InProgress = append(d.InProgress, *nd)
		slots--
	}
	sort.Slice(d.InProgress, func(i, j int) bool { return d.InProgress[i].Node < d.InProgress[j].Node })
	return d
}

// current is a node's state as its labels show it (nothing to write).
func current(n *Node) Want {
	return Want{Step: n.Step, Since: n.Since, ModuleVersion: n.ModuleVersion}
}

// decideNode decides a node that needs something done, nil for one that does not (managed,
// versioned, not under way, or unmanaged and not under way).
func decideNode(f Facts, n *Node) *NodeDecision {
	nd := &NodeDecision{Node: n.Name, Want: current(n)}
	switch {
	case !n.Managed:
		if n.Step == "" {
			return nil
		}
		// Slicer no longer manages the node: its upgrade ends, and nothing fences it.
		nd.Want.Step, nd.Want.Since = "", time.Time{}
		return nd
	case n.ModuleVersion == "":
		if f.Migrate != "" && n.Loaded {
			nd.Want.ModuleVersion, nd.Want.WorkerVersion = f.Migrate, f.Migrate
		} else {
			nd.Want.ModuleVersion = f.Target
		}
		nd.Want.Step, nd.Want.Since = "", time.Time{}
		return nd
	}
	elapsed := f.Now.Sub(n.Since)
	if n.Since.IsZero() {
		// A step with no time (the annotation lost): it starts now.
		nd.Want.Since, elapsed = f.Now, 0
	}
	switch n.Step {
	case "":
		return nil
	case slicerv1alpha1.DriverUpgradeDrain:
		return drain(f, n, nd, elapsed)
	case slicerv1alpha1.DriverUpgradeDriver:
		return load(f, n, nd, elapsed)
	case slicerv1alpha1.DriverUpgradeVerify:
		return verify(f, n, nd, elapsed)
	default:
		// A value no step has: start the node over.
		nd.Want.Step, nd.Want.Since = slicerv1alpha1.DriverUpgradeDrain, f.Now
		nd.Message = fmt.Sprintf("draining: step %q unknown, started over", n.Step)
		return nd
	}
}

func drain(f Facts, n *Node, nd *NodeDecision, elapsed time.Duration) *NodeDecision {
	if n.ModuleVersion == f.Target {
		// The spec asks for what the node runs (rolled back before its driver changed).
		nd.Want.Step, nd.Want.Since = "", time.Time{}
		return nd
	}
	var live, bare, deleting []Pod
	for _, p := range n.Holders {
		switch {
		case p.Deleting:
			deleting = append(deleting, p)
		case p.Bare:
			live = append(live, p)
			bare = append(bare, p)
		default:
			live = append(live, p)
			nd.Evict = append(nd.Evict, p)
		}
	}
	note := ""
	if len(bare) > 0 {
		note = fmt.Sprintf("; not evicted, no controller would recreate them: %s", podList(bare))
	}
	switch {
	case len(n.Holders) > 0 && elapsed > f.Policy.DrainTimeout && f.Policy.Force:
		nd.Evict, nd.Delete = nil, live
		nd.Message = fmt.Sprintf("draining: %d pods did not leave within %s, deleting them (drainTimeoutPolicy Force): %s", len(n.Holders), f.Policy.DrainTimeout, podList(n.Holders))
	case len(n.Holders) > 0:
		nd.Message = fmt.Sprintf("draining: %d pods hold MIG slices: %s%s", len(n.Holders), podList(n.Holders), note)
		if elapsed > f.Policy.DrainTimeout {
			nd.Stalled = true
			nd.Message = fmt.Sprintf("drain timed out after %s: %d pods hold MIG slices and did not leave: %s; "+
				"delete them, relax their budgets, or set spec.driver.upgrade.drainTimeoutPolicy to Force", f.Policy.DrainTimeout, len(n.Holders),
				whyNotLeft(nd.Evict, bare, deleting))
		}
	case n.Releasing > 0:
		nd.Message = fmt.Sprintf("draining: %d slices of pods that left are being released", n.Releasing)
		if elapsed > f.Policy.DrainTimeout {
			nd.Stalled = true
			nd.Message = fmt.Sprintf("drain timed out after %s: %d slices of pods that left are not released (is the node's agent running?)", f.Policy.DrainTimeout, n.Releasing)
		}
	default:
		nd.Want.Step, nd.Want.Since = slicerv1alpha1.DriverUpgradeDriver, f.Now
		nd.Message = "drained; waiting for the agent to leave the node"
	}
	return nd
}

func load(f Facts, n *Node, nd *NodeDecision, elapsed time.Duration) *NodeDecision {
	stall := func(why string) {
		nd.Message = why
		if elapsed > f.Policy.LoadTimeout {
			nd.Stalled = true
			nd.Message = fmt.Sprintf("%s, for longer than %s", why, f.Policy.LoadTimeout)
		}
	}
	switch {
	case n.Agent != AgentNone:
		stall("waiting for the agent to leave the node")
	case n.ModuleVersion != f.Target:
		nd.Want.ModuleVersion = f.Target
		nd.Message = "asking KMM for driver version " + f.Target
	case n.WorkerVersion == f.Target && n.Loaded:
		nd.Want.Step, nd.Want.Since = slicerv1alpha1.DriverUpgradeVerify, f.Now
		nd.Message = "driver version " + f.Target + " loaded; waiting for the agent"
	case n.WorkerFailure != "":
		// KMM retries a failed worker pod: the rollout stops at once, and goes on when KMM
		// succeeds.
		nd.Stalled = true
		nd.Message = fmt.Sprintf("KMM's worker pod fails to swap the driver for version %s: %s", f.Target, n.WorkerFailure)
	case n.WorkerVersion == f.Target:
		stall("KMM is loading driver version " + f.Target)
	default:
		stall("KMM is unloading the driver")
	}
	return nd
}

func verify(f Facts, n *Node, nd *NodeDecision, elapsed time.Duration) *NodeDecision {
	switch {
	case n.ModuleVersion != f.Target:
		// The spec changed again while the agent came back: this node drains once more.
		nd.Want.Step, nd.Want.Since = slicerv1alpha1.DriverUpgradeDrain, f.Now
		nd.Message = "draining: the spec asks for another driver version"
	case n.Agent == AgentReady:
		nd.Want.Step, nd.Want.Since = "", time.Time{}
	default:
		nd.Message = "waiting for the agent to serve again"
		if elapsed > f.Policy.LoadTimeout {
			nd.Stalled = true
			nd.Message = fmt.Sprintf("the agent is not ready %s after driver version %s was loaded", f.Policy.LoadTimeout, f.Target)
		}
	}
	return nd
}

// whyNotLeft words the pods a timed-out drain still waits for, each named once under its cause:
// evicted and held back (a disruption budget refuses the eviction), bare (not evicted), being
// deleted (their grace period).
func whyNotLeft(evicted, bare, deleting []Pod) string {
	var parts []string
	if len(evicted) > 0 {
		parts = append(parts, "evictions go on, a disruption budget refusing them: "+podList(evicted))
	}
	if len(bare) > 0 {
		parts = append(parts, "not evicted, no controller would recreate them: "+podList(bare))
	}
	if len(deleting) > 0 {
		parts = append(parts, "being deleted: "+podList(deleting))
	}
	return strings.Join(parts, "; ")
}

// maxNamedPods caps the pods a message names; the rest are counted.
const maxNamedPods = 5

func podList(pods []Pod) string {
	names := make([]string, 0, min(len(pods), maxNamedPods))
	for i, p := range pods {
		if i == maxNamedPods {
			break
		}
		names = append(names, p.String())
	}
	s := strings.Join(names, ", ")
	if more := len(pods) - len(names); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}
