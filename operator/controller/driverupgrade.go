package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/driverupgrade"
	"github.com/slicer-operator/slicer/operator/render"
)

// DefaultUpgradePoll is how often a driver rollout under way is observed again: pods leaving,
// KMM's labels and the agent's pods raise no event the operator watches on every node.
const DefaultUpgradePoll = 2 * time.Second

// upgradeRound is one observation of the rollout and its decision.
type upgradeRound struct {
	facts    driverupgrade.Facts
	decision driverupgrade.Decision
	nodes    map[string]*corev1.Node
}

// observeUpgrade reads what the rollout's decision needs (driverupgrade.Facts) and decides.
// The nodes are read through APIReader (the manager's cache holds only nodes with a GPU model
// label): the managed ones and those still fenced by an upgrade.
func (r *SlicerReconciler) observeUpgrade(ctx context.Context, o render.Options) (*upgradeRound, error) {
	target, err := render.DriverVersion(o)
	if err != nil {
		return nil, err
	}
	f := driverupgrade.Facts{Target: target, Policy: driverupgrade.PolicyOf(o.Slicer.Spec.Driver.Upgrade), Now: r.now()}
	if f.Migrate, err = r.migrationVersion(ctx, o, target); err != nil {
		return nil, err
	}
	nodes, err := r.upgradeNodes(ctx)
	if err != nil {
		return nil, err
	}
	holders, releasing, err := r.upgradeHolders(ctx)
	if err != nil {
		return nil, err
	}
	agents, err := r.agentsByNode(ctx, o)
	if err != nil {
		return nil, err
	}
	ns, module := o.AgentNamespace, render.ModuleName
	round := &upgradeRound{nodes: map[string]*corev1.Node{}}
	for _, n := range nodes {
		round.nodes[n.Name] = n
		l := n.Labels
		fn := driverupgrade.Node{
			Name:          n.Name,
			Managed:       render.ManagedNode(n),
			Available:     nodeReady(n) && !n.Spec.Unschedulable,
			Step:          slicerv1alpha1.DriverUpgradeStep(l[slicerv1alpha1.LabelDriverUpgrade]),
			ModuleVersion: l[render.KMMModuleVersionLabel(ns, module)],
			WorkerVersion: l[render.KMMWorkerVersionLabel(ns, module)],
			Holders:       holders[n.Name],
			Releasing:     releasing[n.Name],
			Agent:         agents[n.Name],
		}
		_, fn.Loaded = l[render.KMMReadyLabel(ns, module)]
		if t, err := time.Parse(time.RFC3339, n.Annotations[slicerv1alpha1.AnnotationDriverUpgradeSince]); err == nil {
			fn.Since = t
		}
		if fn.Step == slicerv1alpha1.DriverUpgradeDrain {
			if fn.Holders, err = r.liveHolders(ctx, fn.Holders, &fn.Releasing); err != nil {
				return nil, err
			}
		}
		if fn.Step == slicerv1alpha1.DriverUpgradeDriver {
			if fn.WorkerFailure, err = r.workerFailure(ctx, ns, workerPodName(n.Name, module)); err != nil {
				return nil, err
			}
		}
		f.Nodes = append(f.Nodes, fn)
	}
	round.facts, round.decision = f, driverupgrade.Decide(f)
	return round, nil
}

// migrationVersion is the version to give the nodes KMM loaded before the Module had one
// ("" when the live Module has one, or there is none): the target when the live Module loads
// what the spec asks (nothing to reload), else the version of the live Module's settings,
// so those nodes are upgraded node by node like any other.
func (r *SlicerReconciler) migrationVersion(ctx context.Context, o render.Options, target string) (string, error) {
	live := &kmmv1beta1.Module{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.AgentNamespace, Name: render.ModuleName}, live); {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read KMM Module: %w", err)
	}
	have := live.Spec.ModuleLoader.Container
	if have.Version != "" {
		return "", nil
	}
	want, err := render.Module(o)
	if err != nil {
		return "", err
	}
	w, h := want.Spec.ModuleLoader.Container, have
	w.Version = ""
	wu, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&w)
	if err != nil {
		return "", fmt.Errorf("convert the Module's loader: %w", err)
	}
	hu, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&h)
	if err != nil {
		return "", fmt.Errorf("convert the live Module's loader: %w", err)
	}
	pruneNulls(wu)
	if subset(wu, hu) {
		return target, nil
	}
	return render.ModuleVersion(have), nil
}

// upgradeNodes lists the managed nodes and those an upgrade still fences, by name.
func (r *SlicerReconciler) upgradeNodes(ctx context.Context) ([]*corev1.Node, error) {
	seen := map[string]bool{}
	var out []*corev1.Node
	for _, sel := range []client.ListOption{
		client.MatchingLabels{slicerv1alpha1.LabelMIGCapable: "true"},
		client.HasLabels{slicerv1alpha1.LabelDriverUpgrade},
	} {
		var list corev1.NodeList
		if err := r.apiReader().List(ctx, &list, sel, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		for i := range list.Items {
			if n := &list.Items[i]; !seen[n.Name] {
				seen[n.Name] = true
				out = append(out, n)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// upgradeHolders groups by node the pods that hold slices there (SliceAllocations;
// ResourceClaims of Slicer's DRA driver, whose pool is the node) and counts the slices being
// released (allocations and claims being deleted).
func (r *SlicerReconciler) upgradeHolders(ctx context.Context) (map[string][]driverupgrade.Pod, map[string]int, error) {
	byNode := map[string]map[types.UID]driverupgrade.Pod{}
	releasing := map[string]int{}
	add := func(node string, p driverupgrade.Pod) {
		if byNode[node] == nil {
			byNode[node] = map[types.UID]driverupgrade.Pod{}
		}
		byNode[node][p.UID] = p
	}
	var allocs slicerv1alpha1.SliceAllocationList
	switch err := r.Client.List(ctx, &allocs); {
	case meta.IsNoMatchError(err):
	case err != nil:
		return nil, nil, fmt.Errorf("list SliceAllocations: %w", err)
	}
	for i := range allocs.Items {
		a := &allocs.Items[i]
		if a.DeletionTimestamp != nil {
			releasing[a.Spec.NodeName]++
			continue
		}
		add(a.Spec.NodeName, driverupgrade.Pod{NamespacedName: types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.PodName}, UID: types.UID(a.Spec.PodUID)})
	}
	claims, err := r.driverClaims(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range claims {
		if c.deleting {
			releasing[c.node]++
			continue
		}
		for _, p := range c.pods {
			add(c.node, p)
		}
	}
	out := map[string][]driverupgrade.Pod{}
	for node, pods := range byNode {
		for _, p := range pods {
			out[node] = append(out[node], p)
		}
		sort.Slice(out[node], func(i, j int) bool { return out[node][i].String() < out[node][j].String() })
	}
	return out, releasing, nil
}

// liveHolders reads the holder pods of a node being drained: a pod gone (or another of the
// same name) holds nothing any more, its slice is being released; a terminating one is
// waited for.
func (r *SlicerReconciler) liveHolders(ctx context.Context, pods []driverupgrade.Pod, releasing *int) ([]driverupgrade.Pod, error) {
	var out []driverupgrade.Pod
	for _, p := range pods {
		var pod corev1.Pod
		err := r.apiReader().Get(ctx, p.NamespacedName, &pod)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && pod.UID != p.UID):
			*releasing++
			continue
		case err != nil:
			return nil, fmt.Errorf("read pod %s: %w", p, err)
		}
		p.Deleting = pod.DeletionTimestamp != nil
		p.Bare = metav1.GetControllerOfNoCopy(&pod) == nil
		out = append(out, p)
	}
	return out, nil
}

// agentsByNode is the state of the agent's pod on each node (the manager's cache holds the
// agent namespace's pods).
func (r *SlicerReconciler) agentsByNode(ctx context.Context, o render.Options) (map[string]driverupgrade.Agent, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(o.AgentNamespace), client.MatchingLabels(render.ComponentPodLabels(render.ComponentAgent))); err != nil {
		return nil, fmt.Errorf("list agent pods: %w", err)
	}
	out := map[string]driverupgrade.Agent{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" {
			continue
		}
		state := driverupgrade.AgentStarting
		if p.DeletionTimestamp == nil && podReady(p) {
			state = driverupgrade.AgentReady
		}
		if state > out[p.Spec.NodeName] {
			out[p.Spec.NodeName] = state
		}
	}
	return out, nil
}

// workerPodName is KMM's name of its worker pod of a module on a node (KMM's
// internal/controllers/nmc_reconciler.go, workerPodName).
func workerPodName(node, module string) string { return "kmm-worker-" + node + "-" + module }

// workerFailure says why KMM's worker pod fails, "" when it does not (or there is none).
// KMM runs it with restartPolicy OnFailure and recreates a Failed one: a container that
// exited non-zero, restarts or waits in CrashLoopBackOff is a failing load or unload.
func (r *SlicerReconciler) workerFailure(ctx context.Context, namespace, name string) (string, error) {
	var pod corev1.Pod
	switch err := r.apiReader().Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pod); {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read KMM's worker pod %s: %w", name, err)
	}
	if pod.Status.Phase == corev1.PodFailed {
		return fmt.Sprintf("pod %s failed: %s", name, pod.Status.Message), nil
	}
	for _, c := range append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if t := c.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("pod %s, container %s exited %d (%s), restarted %d times", name, c.Name, t.ExitCode, t.Reason, c.RestartCount), nil
		}
		if t := c.State.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("pod %s, container %s exited %d (%s)", name, c.Name, t.ExitCode, t.Reason), nil
		}
		if w := c.State.Waiting; w != nil && (w.Reason == "CrashLoopBackOff" || w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
			return fmt.Sprintf("pod %s, container %s: %s: %s", name, c.Name, w.Reason, w.Message), nil
		}
	}
	return "", nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// driverUpgradeLabelsChanged passes Node events that change what the rollout reads: KMM's
// ready and version labels of Slicer's Module, the upgrade's own label, and whether the node
// may take pods.
func driverUpgradeLabelsChanged(agentNamespace string) predicate.Funcs {
	keys := []string{
		render.KMMReadyLabel(agentNamespace, render.ModuleName),
		render.KMMModuleVersionLabel(agentNamespace, render.ModuleName),
		render.KMMWorkerVersionLabel(agentNamespace, render.ModuleName),
		slicerv1alpha1.LabelDriverUpgrade,
	}
	facts := func(o client.Object) string {
		l := o.GetLabels()
		s := ""
		for _, k := range keys {
			v, ok := l[k]
			s += fmt.Sprintf("%t=%s;", ok, v)
		}
		if n, ok := o.(*corev1.Node); ok {
			s += fmt.Sprintf("%t;%t", n.Spec.Unschedulable, nodeReady(n))
		}
		return s
	}
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return facts(e.ObjectOld) != facts(e.ObjectNew) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// prepareUpgrade observes and decides the rollout before the Module is applied (KMM mode).
// held is true when the Module must not be applied yet: the observation failed (migrating
// blind could unload every node), or nodes KMM loaded before the Module had a version are
// given their version labels first (migration), which it writes now.
func (r *SlicerReconciler) prepareUpgrade(ctx context.Context, o render.Options, st *status, res *result) (*upgradeRound, bool) {
	const cond = slicerv1alpha1.ConditionDriverUpgraded
	if !render.OrderedUpgrade(o) {
		st.set(cond, metav1.ConditionFalse, slicerv1alpha1.ReasonOrderedUpgradeUnavailable, fmt.Sprintf(
			"KMM's version labels cannot name Module %s/%s (the agent namespace has more than 27 characters): a change of spec.driver reaches every node at once", o.AgentNamespace, render.ModuleName))
		st.next.DriverUpgrade = nil
		r.Metrics.ForgetUpgrade()
		return nil, false
	}
	round, err := r.observeUpgrade(ctx, o)
	if err != nil {
		res.fail(fmt.Errorf("driver upgrade: %w", err))
		st.set(slicerv1alpha1.ConditionDriverReady, metav1.ConditionFalse, slicerv1alpha1.ReasonApplyFailed, "the nodes' driver versions could not be read, so the KMM Module is left as it is: "+err.Error())
		return nil, true
	}
	if !round.decision.Migrating() {
		return round, false
	}
	if err := r.writeUpgrade(ctx, o, round); err != nil {
		res.fail(fmt.Errorf("driver upgrade: %w", err))
	}
	st.set(slicerv1alpha1.ConditionDriverReady, metav1.ConditionFalse, slicerv1alpha1.ReasonDriverLoading,
		"giving the nodes KMM loaded the version they run before the KMM Module gets one (an install from before ordered driver upgrades)")
	res.requeueAfter(time.Second)
	return round, true
}

// finishUpgrade carries out the decision once the Module is applied, and records the status,
// the condition and the metrics. It returns how many managed nodes the rollout has without
// the driver loaded (Driver and Verify steps).
func (r *SlicerReconciler) finishUpgrade(ctx context.Context, o render.Options, round *upgradeRound, st *status, res *result) int {
	if round == nil {
		return 0
	}
	if err := r.writeUpgrade(ctx, o, round); err != nil {
		res.fail(fmt.Errorf("driver upgrade: %w", err))
	}
	d := round.decision
	if err := r.fenceDRA(ctx, o, d); err != nil {
		res.fail(fmt.Errorf("driver upgrade: %w", err))
	}
	status, reason, msg := d.Condition(round.facts.Target, round.facts.Policy)
	if render.UsesDRA(o) && !o.Platform.DeviceTaintRules && len(d.InProgress) > 0 {
		msg += "; the apiserver serves no DeviceTaintRule (resource.k8s.io/v1, Kubernetes 1.37), so new claims may still get devices on the nodes under way"
	}
	st.set(slicerv1alpha1.ConditionDriverUpgraded, status, reason, msg)
	st.next.DriverUpgrade = d.Status(round.facts.Target)
	steps := map[string]int{}
	var oldest time.Time
	swapping := 0
	for _, n := range d.InProgress {
		steps[string(n.Want.Step)]++
		if oldest.IsZero() || n.Want.Since.Before(oldest) {
			oldest = n.Want.Since
		}
		if n.Want.Step != slicerv1alpha1.DriverUpgradeDrain {
			swapping++
		}
	}
	r.Metrics.RecordUpgrade(d.Versions, steps, oldest, d.Stalled)
	if !d.Done() {
		res.requeueAfter(orDefault(r.UpgradePoll, DefaultUpgradePoll))
	}
	return swapping
}

// fenceDRA keeps a DeviceTaintRule on each node under way in the DRA frontend (the stock
// scheduler reads no node label of Slicer's), and deletes the others. Without the
// DeviceTaintRule API (Kubernetes 1.36) there is no such fence: the condition says so.
func (r *SlicerReconciler) fenceDRA(ctx context.Context, o render.Options, d driverupgrade.Decision) error {
	if !o.Platform.DeviceTaintRules {
		return nil
	}
	want := map[string]bool{}
	var objs []client.Object
	if render.UsesDRA(o) {
		for _, n := range d.InProgress {
			rule := render.DriverUpgradeTaintRule(n.Node)
			want[rule.Name] = true
			objs = append(objs, rule)
		}
	}
	ap := applier{c: r.Client, owner: o.Slicer}
	if _, err := ap.applyAll(ctx, objs); err != nil {
		return fmt.Errorf("fence the DRA devices of the nodes under way: %w", err)
	}
	var rules resourceapi.DeviceTaintRuleList
	if err := r.Client.List(ctx, &rules, client.MatchingLabels{render.ManagedByLabel: render.ManagedByValue}); err != nil {
		return fmt.Errorf("list DeviceTaintRules: %w", err)
	}
	var stale []client.Object
	for i := range rules.Items {
		rule := &rules.Items[i]
		if strings.HasPrefix(rule.Name, render.DriverUpgradeTaintPrefix) && !want[rule.Name] {
			rule.SetGroupVersionKind(resourceapi.SchemeGroupVersion.WithKind("DeviceTaintRule"))
			stale = append(stale, rule)
		}
	}
	return r.removeAll(ctx, stale)
}
