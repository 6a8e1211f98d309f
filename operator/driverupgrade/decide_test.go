package driverupgrade

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

const (
	v1 = "aaaaaaaaaaaa"
	v2 = "bbbbbbbbbbbb"
)

var (
	t0     = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	policy = Policy{MaxUnavailable: 1, DrainTimeout: 10 * time.Minute, LoadTimeout: 15 * time.Minute}
)

// node builds a managed, available node that runs version at rest (agent ready).
func node(name, version string) Node {
	return Node{Name: name, Managed: true, Available: true, ModuleVersion: version, WorkerVersion: version, Loaded: true, Agent: AgentReady}
}

func (n Node) at(step slicerv1alpha1.DriverUpgradeStep, since time.Time) Node {
	n.Step, n.Since = step, since
	return n
}

func (n Node) holding(names ...string) Node {
	for _, p := range names {
		n.Holders = append(n.Holders, Pod{NamespacedName: types.NamespacedName{Namespace: "team", Name: p}, UID: types.UID("uid-" + p)})
	}
	return n
}

func (n Node) with(f func(*Node)) Node { f(&n); return n }

func facts(nodes ...Node) Facts {
	return Facts{Target: v2, Policy: policy, Nodes: nodes, Now: t0}
}

// decisionOf is the decision of one node by name.
func decisionOf(t *testing.T, d Decision, name string) NodeDecision {
	t.Helper()
	for _, n := range d.Nodes {
		if n.Node == name {
			return n
		}
	}
	t.Fatalf("no decision for node %s", name)
	return NodeDecision{}
}

// Which node goes next: one at a time (maxUnavailable), none while one stalls or the rollout
// is paused, nodes without MIG pods first, then by name; cordoned and down nodes wait (the
// platform's drain), and so do nodes at the target.
func TestWhichNodeNext(t *testing.T) {
	drain := slicerv1alpha1.DriverUpgradeDrain
	for _, tc := range []struct {
		name    string
		f       Facts
		started []string
	}{
		{"one at a time, by name", facts(node("b", v1), node("a", v1), node("c", v1)), []string{"a"}},
		{"nodes without MIG pods first", facts(node("a", v1).holding("p"), node("b", v1)), []string{"b"}},
		{"maxUnavailable 2", func() Facts {
			f := facts(node("a", v1), node("b", v1), node("c", v1))
			f.Policy.MaxUnavailable = 2
			return f
		}(), []string{"a", "b"}},
		{"the slot is taken by a node under way", facts(node("a", v1).at(drain, t0).holding("p"), node("b", v1)), nil},
		{"a stalled node stops the rollout", func() Facts {
			f := facts(node("a", v1).at(drain, t0.Add(-time.Hour)).holding("p"), node("b", v1))
			f.Policy.MaxUnavailable = 2
			return f
		}(), nil},
		{"paused", func() Facts { f := facts(node("a", v1)); f.Policy.Paused = true; return f }(), nil},
		{"cordoned or down nodes wait for the platform", facts(node("a", v1).with(func(n *Node) { n.Available = false }), node("b", v2)), nil},
		{"nodes at the target need nothing", facts(node("a", v2), node("b", v2)), nil},
		{"unmanaged nodes are never started", facts(node("a", v1).with(func(n *Node) { n.Managed = false })), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.f)
			var started []string
			for _, n := range d.Nodes {
				var was slicerv1alpha1.DriverUpgradeStep
				for _, in := range tc.f.Nodes {
					if in.Name == n.Node {
						was = in.Step
					}
				}
				if was == "" && n.Want.Step == drain {
					started = append(started, n.Node)
					if !n.Want.Since.Equal(t0) {
						t.Errorf("node %s started at %v, want %v", n.Node, n.Want.Since, t0)
					}
				}
			}
			if diff := cmp.Diff(tc.started, started); diff != "" {
				t.Errorf("started (-want +got):\n%s", diff)
			}
		})
	}
}

// When a step is done, and what it does meanwhile: a table of one node each.
func TestWhenAStepIsDone(t *testing.T) {
	drain, driver, verify := slicerv1alpha1.DriverUpgradeDrain, slicerv1alpha1.DriverUpgradeDriver, slicerv1alpha1.DriverUpgradeVerify
	ago := t0.Add(-time.Minute)
	for _, tc := range []struct {
		name    string
		n       Node
		want    Want
		evict   int
		message string
	}{
		{"drain: pods hold slices, evicted", node("a", v1).at(drain, ago).holding("p", "q"),
			Want{Step: drain, Since: ago, ModuleVersion: v1}, 2, "2 pods hold MIG slices: team/p, team/q"},
		{"drain: a bare pod is not evicted", node("a", v1).at(drain, ago).holding("p", "bare").with(func(n *Node) { n.Holders[0].Bare = true }),
			Want{Step: drain, Since: ago, ModuleVersion: v1}, 1, "not evicted, no controller would recreate them: team/p"},
		{"drain: a terminating pod is waited for, not evicted again", node("a", v1).at(drain, ago).holding("p").with(func(n *Node) { n.Holders[0].Deleting = true }),
			Want{Step: drain, Since: ago, ModuleVersion: v1}, 0, "1 pods hold MIG slices"},
		{"drain: slices still being released", node("a", v1).at(drain, ago).with(func(n *Node) { n.Releasing = 2 }),
			Want{Step: drain, Since: ago, ModuleVersion: v1}, 0, "2 slices of pods that left are being released"},
		{"drain: done", node("a", v1).at(drain, ago),
			Want{Step: driver, Since: t0, ModuleVersion: v1}, 0, "drained"},
		{"drain: rolled back before the driver changed", node("a", v2).at(drain, ago).holding("p"),
			Want{ModuleVersion: v2}, 0, ""},
		{"driver: the agent is still on the node", node("a", v1).at(driver, ago),
			Want{Step: driver, Since: ago, ModuleVersion: v1}, 0, "waiting for the agent to leave"},
		{"driver: the agent left: ask KMM", node("a", v1).at(driver, ago).with(func(n *Node) { n.Agent = AgentNone }),
			Want{Step: driver, Since: ago, ModuleVersion: v2}, 0, "asking KMM for driver version " + v2},
		{"driver: KMM unloads", node("a", v2).at(driver, ago).with(func(n *Node) { n.Agent, n.WorkerVersion = AgentNone, v1 }),
			Want{Step: driver, Since: ago, ModuleVersion: v2}, 0, "unloading"},
		{"driver: KMM loads", node("a", v2).at(driver, ago).with(func(n *Node) { n.Agent, n.Loaded = AgentNone, false }),
			Want{Step: driver, Since: ago, ModuleVersion: v2}, 0, "KMM is loading driver version " + v2},
		{"driver: the old version's ready label is not the new version's", node("a", v2).at(driver, ago).with(func(n *Node) { n.Agent, n.WorkerVersion = AgentNone, v1 }),
			Want{Step: driver, Since: ago, ModuleVersion: v2}, 0, "unloading"},
		{"driver: done", node("a", v2).at(driver, ago).with(func(n *Node) { n.Agent = AgentNone }),
			Want{Step: verify, Since: t0, ModuleVersion: v2}, 0, "loaded; waiting for the agent"},
		{"verify: the agent starts", node("a", v2).at(verify, ago).with(func(n *Node) { n.Agent = AgentStarting }),
			Want{Step: verify, Since: ago, ModuleVersion: v2}, 0, "waiting for the agent to serve again"},
		{"verify: done, the node takes MIG pods again", node("a", v2).at(verify, ago),
			Want{ModuleVersion: v2}, 0, ""},
		{"verify: the spec changed again", node("a", v1).at(verify, ago),
			Want{Step: drain, Since: t0, ModuleVersion: v1}, 0, "another driver version"},
		{"a step without its time starts its clock now", node("a", v1).at(drain, time.Time{}).holding("p"),
			Want{Step: drain, Since: t0, ModuleVersion: v1}, 1, "1 pods hold"},
		{"an unknown step starts over", node("a", v1).at("Reboot", ago),
			Want{Step: drain, Since: t0, ModuleVersion: v1}, 0, "unknown, started over"},
		{"a new node gets the target: it runs nothing yet", node("a", "").with(func(n *Node) { n.WorkerVersion, n.Loaded, n.Agent = "", false, AgentNone }),
			Want{ModuleVersion: v2}, 0, ""},
		{"an unmanaged node under way is released", node("a", v1).at(drain, ago).holding("p").with(func(n *Node) { n.Managed = false }),
			Want{ModuleVersion: v1}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(facts(tc.n))
			nd := decisionOf(t, d, "a")
			if diff := cmp.Diff(tc.want, nd.Want); diff != "" {
				t.Errorf("want (-want +got):\n%s", diff)
			}
			if len(nd.Evict) != tc.evict || len(nd.Delete) != 0 {
				t.Errorf("evict %v delete %v, want %d evictions", nd.Evict, nd.Delete, tc.evict)
			}
			if !strings.Contains(nd.Message, tc.message) {
				t.Errorf("message %q lacks %q", nd.Message, tc.message)
			}
			if nd.Stalled {
				t.Errorf("stalled: %s", nd.Message)
			}
		})
	}
}

// What a stall looks like: past the drain timeout (policy Wait) with pods left, past the load
// timeout at the Driver or Verify step, or at once while KMM's worker fails. Force deletes the
// pods left instead of stalling.
func TestWhatAStallLooksLike(t *testing.T) {
	drain, driver, verify := slicerv1alpha1.DriverUpgradeDrain, slicerv1alpha1.DriverUpgradeDriver, slicerv1alpha1.DriverUpgradeVerify
	late := t0.Add(-time.Hour)
	for _, tc := range []struct {
		name    string
		n       Node
		force   bool
		stalled bool
		message string
	}{
		{"a pod will not leave", node("a", v1).at(drain, late).holding("bare"), false, true, "drain timed out after 10m0s: 1 pods hold MIG slices and did not leave"},
		{"within the drain timeout", node("a", v1).at(drain, t0.Add(-9*time.Minute)).holding("bare"), false, false, "draining"},
		{"a bare pod blocks the drain", node("a", v1).at(drain, late).holding("bare").with(func(n *Node) { n.Holders[0].Bare = true }), false, true, "not evicted, no controller would recreate them: team/bare"},
		{"Force deletes the pods left", node("a", v1).at(drain, late).holding("bare"), true, false, "deleting them (drainTimeoutPolicy Force)"},
		{"slices never released", node("a", v1).at(drain, late).with(func(n *Node) { n.Releasing = 1 }), false, true, "is the node's agent running?"},
		{"the agent does not leave", node("a", v1).at(driver, late), false, true, "waiting for the agent to leave the node, for longer than 15m0s"},
		{"KMM does not load the new version", node("a", v2).at(driver, late).with(func(n *Node) { n.Agent, n.Loaded = AgentNone, false }), false, true, "KMM is loading driver version " + v2 + ", for longer than"},
		{"KMM's worker pod fails", node("a", v2).at(driver, t0).with(func(n *Node) { n.Agent, n.Loaded, n.WorkerFailure = AgentNone, false, "worker: exit code 1" }), false, true, "KMM's worker pod fails to swap the driver for version " + v2 + ": worker: exit code 1"},
		{"the agent does not come back", node("a", v2).at(verify, late).with(func(n *Node) { n.Agent = AgentStarting }), false, true, "the agent is not ready 15m0s after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := facts(tc.n, node("b", v1))
			f.Policy.Force = tc.force
			d := Decide(f)
			nd := decisionOf(t, d, "a")
			if nd.Stalled != tc.stalled || d.Stalled != tc.stalled {
				t.Errorf("stalled %v (decision %v), want %v: %s", nd.Stalled, d.Stalled, tc.stalled, nd.Message)
			}
			if !strings.Contains(nd.Message, tc.message) {
				t.Errorf("message %q lacks %q", nd.Message, tc.message)
			}
			if tc.force && (len(nd.Delete) != 1 || len(nd.Evict) != 0) {
				t.Errorf("Force: delete %v evict %v", nd.Delete, nd.Evict)
			}
			if tc.stalled {
				if b := decisionOf(t, d, "b"); b.Want.Step != "" {
					t.Errorf("node b started while a stalls")
				}
				status, reason, msg := d.Condition(v2, f.Policy)
				if status != metav1.ConditionFalse || reason != slicerv1alpha1.ReasonDriverUpgradeStalled || !strings.Contains(msg, "node a (") {
					t.Errorf("condition %s %s %q", status, reason, msg)
				}
			}
		})
	}
}

// A timed-out drain names each pod it waits for once, under its cause (the stall message once
// named a bare pod among the holders and again in the "not evicted" note).
func TestStallNamesEachPodOnceWithItsCause(t *testing.T) {
	drain := slicerv1alpha1.DriverUpgradeDrain
	n := node("a", v1).at(drain, t0.Add(-time.Hour)).holding("budgeted", "bare", "going").with(func(n *Node) {
		n.Holders[1].Bare = true
		n.Holders[2].Deleting = true
	})
	nd := decisionOf(t, Decide(facts(n, node("b", v1))), "a")
	want := "drain timed out after 10m0s: 3 pods hold MIG slices and did not leave: " +
		"evictions go on, a disruption budget refusing them: team/budgeted; " +
		"not evicted, no controller would recreate them: team/bare; being deleted: team/going; " +
		"delete them, relax their budgets, or set spec.driver.upgrade.drainTimeoutPolicy to Force"
	if !nd.Stalled || nd.Message != want {
		t.Errorf("stalled %v, message\n%q\nwant\n%q", nd.Stalled, nd.Message, want)
	}
}

// The platform's own upgrades (a kernel upgrade: the platform cordons and drains the node,
// reboots it, KMM loads the same version for the new kernel): Slicer neither starts the node
// nor drains it a second time, nor fences it; a node the platform takes down while Slicer
// upgrades it goes on with its step (its pods are gone already: nothing is evicted twice).
func TestPlatformUpgrade(t *testing.T) {
	drain := slicerv1alpha1.DriverUpgradeDrain
	rebooting := func(n *Node) { n.Available, n.Loaded, n.Agent = false, false, AgentStarting }
	// At the target: nothing at all, whatever KMM and the agent do through the reboot.
	d := Decide(facts(node("a", v2).with(rebooting), node("b", v2)))
	for _, nd := range d.Nodes {
		if nd.Want != (Want{ModuleVersion: v2}) || len(nd.Evict)+len(nd.Delete) != 0 {
			t.Errorf("node %s: %+v during the platform's upgrade", nd.Node, nd)
		}
	}
	if !d.Done() {
		t.Errorf("not done: %+v", d)
	}
	// Outdated and cordoned by the platform: not started, the next available node is.
	d = Decide(facts(node("a", v1).with(rebooting), node("b", v1)))
	if a, b := decisionOf(t, d, "a"), decisionOf(t, d, "b"); a.Want.Step != "" || b.Want.Step != drain {
		t.Errorf("a %+v, b %+v: want b started, a left to the platform", a.Want, b.Want)
	}
	// Rebooted while draining, its pods already evicted by the platform's drain: the step
	// goes on, nothing is evicted.
	d = Decide(facts(node("a", v1).at(drain, t0.Add(-time.Minute)).with(rebooting)))
	if a := decisionOf(t, d, "a"); a.Want.Step != slicerv1alpha1.DriverUpgradeDriver || len(a.Evict) != 0 {
		t.Errorf("a %+v", a)
	}
}

// An install from before ordered upgrades: KMM loaded the driver with no version, so the
// nodes get the version they run, both labels, before the Module gets one (Migrating); a node
// KMM did not load gets the target.
func TestMigration(t *testing.T) {
	loaded := node("a", "").with(func(n *Node) { n.WorkerVersion = "" })
	fresh := node("b", "").with(func(n *Node) { n.WorkerVersion, n.Loaded, n.Agent = "", false, AgentNone })
	f := facts(loaded, fresh)
	f.Migrate = v1
	d := Decide(f)
	if !d.Migrating() {
		t.Fatal("not migrating")
	}
	if got := decisionOf(t, d, "a").Want; got != (Want{ModuleVersion: v1, WorkerVersion: v1}) {
		t.Errorf("loaded node: %+v", got)
	}
	if got := decisionOf(t, d, "b").Want; got != (Want{ModuleVersion: v2}) {
		t.Errorf("fresh node: %+v", got)
	}
	if d.Outdated != 1 || d.Updated != 1 || len(d.InProgress) != 0 {
		t.Errorf("counts %d outdated %d updated %d in progress", d.Outdated, d.Updated, len(d.InProgress))
	}
	// Once labelled, the loaded node is upgraded like any other.
	f.Nodes = []Node{node("a", v1), node("b", v2)}
	if d = Decide(f); d.Migrating() || decisionOf(t, d, "a").Want.Step != slicerv1alpha1.DriverUpgradeDrain {
		t.Errorf("after migration: %+v", d)
	}
}

// Deciding again from what a decision wrote decides nothing new (a restart at any step
// resumes from the labels): the whole rollout of two nodes, replayed through a model of KMM,
// the DaemonSet and the pods, with the decision re-made from scratch before every write.
func TestRolloutFromLabelsAlone(t *testing.T) {
	nodes := []Node{node("a", v1).holding("p"), node("b", v1)}
	now := t0
	for step := 0; step < 40; step++ {
		d := Decide(Facts{Target: v2, Policy: policy, Nodes: nodes, Now: now})
		if d.Done() && d.Nodes[0].Want.Step == "" && d.Nodes[1].Want.Step == "" && nodes[0].Step == "" && nodes[1].Step == "" {
			if step < 8 {
				t.Fatalf("done after %d steps", step)
			}
			for _, n := range nodes {
				if n.ModuleVersion != v2 || n.WorkerVersion != v2 || n.Step != "" || n.Agent != AgentReady {
					t.Errorf("node %s at the end: %+v", n.Name, n)
				}
			}
			return
		}
		again := Decide(Facts{Target: v2, Policy: policy, Nodes: nodes, Now: now})
		if diff := cmp.Diff(d, again); diff != "" {
			t.Fatalf("step %d: a second decision differs (-first +second):\n%s", step, diff)
		}
		if d.Stalled {
			t.Fatalf("step %d: stalled: %+v", step, d.InProgress)
		}
		if len(d.InProgress) > 1 {
			t.Fatalf("step %d: %d nodes under way with maxUnavailable 1", step, len(d.InProgress))
		}
		for i := range nodes {
			n := &nodes[i]
			nd := decisionOf(t, d, n.Name)
			n.Step, n.Since, n.ModuleVersion = nd.Want.Step, nd.Want.Since, nd.Want.ModuleVersion
			for range nd.Evict {
				n.Holders = nil // evicted; the agent releases the slice at once in this model
			}
			// The DaemonSet: off at Driver, back after.
			switch {
			case n.Step == slicerv1alpha1.DriverUpgradeDriver:
				n.Agent = AgentNone
			case n.Agent == AgentNone:
				n.Agent = AgentStarting
			default:
				n.Agent = AgentReady
			}
			// KMM: worker label follows the module label through an unload and a load.
			if n.ModuleVersion != n.WorkerVersion {
				if n.Loaded {
					n.Loaded = false
				} else {
					n.WorkerVersion = n.ModuleVersion
				}
			} else if !n.Loaded && n.Agent == AgentNone {
				n.Loaded = true
			}
		}
		now = now.Add(10 * time.Second)
	}
	t.Fatalf("not done after 40 steps: %+v", nodes)
}

func TestConditionAndStatus(t *testing.T) {
	d := Decide(facts(node("a", v2), node("b", v1).at(slicerv1alpha1.DriverUpgradeDrain, t0).holding("p"), node("c", v1)))
	status, reason, msg := d.Condition(v2, policy)
	if status != metav1.ConditionFalse || reason != slicerv1alpha1.ReasonDriverUpgrading ||
		!strings.Contains(msg, "node b (Drain): draining: 1 pods hold MIG slices: team/p") || !strings.Contains(msg, "1 of 3 nodes run driver version "+v2) {
		t.Errorf("condition %s %s %q", status, reason, msg)
	}
	st := d.Status(v2)
	want := &slicerv1alpha1.DriverUpgradeStatus{TargetVersion: v2, UpdatedNodes: 1, OutdatedNodes: 1, Nodes: []slicerv1alpha1.NodeDriverUpgrade{
		{Name: "b", Step: slicerv1alpha1.DriverUpgradeDrain, Since: metav1.NewTime(t0), Message: "draining: 1 pods hold MIG slices: team/p"},
	}}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	p := policy
	p.Paused = true
	if _, reason, _ := Decide(Facts{Target: v2, Policy: p, Nodes: []Node{node("a", v1)}, Now: t0}).Condition(v2, p); reason != slicerv1alpha1.ReasonDriverUpgradePaused {
		t.Errorf("paused: reason %s", reason)
	}
	if status, reason, _ := Decide(facts(node("a", v2))).Condition(v2, policy); status != metav1.ConditionTrue || reason != slicerv1alpha1.ReasonAsExpected {
		t.Errorf("done: %s %s", status, reason)
	}
}
