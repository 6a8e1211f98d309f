package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/driverupgrade"
	"github.com/slicer-operator/slicer/operator/render"
)

// DriverUpgradeFieldManager is the server-side-apply field manager of the driver upgrade's
// keys on a Node: its step label and annotation while the node is under way, and KMM's
// module-version label of Slicer's Module. A manager of their own, so that no other field
// of a Node is the upgrade's, and so that applying less removes what it set.
const DriverUpgradeFieldManager = slicerv1alpha1.OperatorName + "-driver-upgrade"

// DriverUpgradeMigrationFieldManager writes, once, the two version labels of a node KMM
// loaded before the Module had a version (driverupgrade.Want.WorkerVersion). A manager of
// its own that never applies again: KMM's worker-pod label is KMM's from then on, and an
// apply of DriverUpgradeFieldManager without it must not remove it.
const DriverUpgradeMigrationFieldManager = slicerv1alpha1.OperatorName + "-driver-upgrade-migration"

// nodeKeys are the driver upgrade's keys a node should carry, by value; a key of
// render.DriverUpgradeKeys that is not here should be absent, but KMM's worker-pod label,
// which only the migration writes.
type nodeKeys struct {
	manager             string
	labels, annotations map[string]string
}

// wantedKeys are the keys that make a node show want.
func wantedKeys(o render.Options, want driverupgrade.Want) nodeKeys {
	module := render.KMMModuleVersionLabel(o.AgentNamespace, render.ModuleName)
	k := nodeKeys{manager: DriverUpgradeFieldManager, labels: map[string]string{}, annotations: map[string]string{}}
	if want.ModuleVersion != "" {
		k.labels[module] = want.ModuleVersion
	}
	if want.WorkerVersion != "" {
		// Both labels in one write: KMM never sees one without the other (its
		// internal/controllers/module_version_label_action_table.go deletes a worker-pod label
		// without a module label).
		k.manager = DriverUpgradeMigrationFieldManager
		k.labels[render.KMMWorkerVersionLabel(o.AgentNamespace, render.ModuleName)] = want.WorkerVersion
		return k
	}
	if want.Step != "" {
		k.labels[slicerv1alpha1.LabelDriverUpgrade] = string(want.Step)
		if !want.Since.IsZero() {
			k.annotations[slicerv1alpha1.AnnotationDriverUpgradeSince] = want.Since.UTC().Format(time.RFC3339)
		}
	}
	return k
}

// stale lists the keys of render.DriverUpgradeKeys (the worker-pod label aside) that have
// has but k does not: the ones to remove.
func (k nodeKeys) stale(o render.Options, labels, annotations map[string]string) (staleLabels, staleAnnotations []string) {
	if k.manager == DriverUpgradeMigrationFieldManager {
		return nil, nil // it adds two labels, and removes nothing
	}
	keys, annotationKeys := render.DriverUpgradeKeys(o)
	worker := render.KMMWorkerVersionLabel(o.AgentNamespace, render.ModuleName)
	for _, key := range keys {
		if _, want := k.labels[key]; !want && key != worker {
			if _, has := labels[key]; has {
				staleLabels = append(staleLabels, key)
			}
		}
	}
	for _, key := range annotationKeys {
		if _, want := k.annotations[key]; !want {
			if _, has := annotations[key]; has {
				staleAnnotations = append(staleAnnotations, key)
			}
		}
	}
	return staleLabels, staleAnnotations
}

// shownBy reports whether a node with these labels and annotations shows k.
func (k nodeKeys) shownBy(o render.Options, labels, annotations map[string]string) bool {
	for key, v := range k.labels {
		if have, ok := labels[key]; !ok || have != v {
			return false
		}
	}
	for key, v := range k.annotations {
		if have, ok := annotations[key]; !ok || have != v {
			return false
		}
	}
	sl, sa := k.stale(o, labels, annotations)
	return len(sl) == 0 && len(sa) == 0
}

// applyNodeKeys makes node n show k, and reports whether it wrote: a server-side apply of
// k's keys under k's manager (forcing ownership: a key someone else set is taken over),
// which removes the keys the manager applied before and no longer applies. A key the apply
// leaves because another manager holds it too (a label set by hand, or by the migration) is
// then deleted by a JSON merge patch naming only it. Nothing is written when n shows k.
func (r *SlicerReconciler) applyNodeKeys(ctx context.Context, o render.Options, n *corev1.Node, k nodeKeys) (bool, error) {
	if k.shownBy(o, n.Labels, n.Annotations) {
		return false, nil
	}
	ac := corev1ac.Node(n.Name).WithLabels(k.labels).WithAnnotations(k.annotations)
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(k.manager), client.ForceOwnership); err != nil {
		return false, err
	}
	// The apply answered with the whole node.
	staleLabels, staleAnnotations := k.stale(o, ac.Labels, ac.Annotations)
	if len(staleLabels) == 0 && len(staleAnnotations) == 0 {
		return true, nil
	}
	return true, r.Client.Patch(ctx, n, client.RawPatch(types.MergePatchType, deleteKeysPatch(staleLabels, staleAnnotations)))
}

// deleteKeysPatch is the JSON merge patch that deletes these labels and annotations.
func deleteKeysPatch(labels, annotations []string) []byte {
	nulls := func(keys []string) map[string]any {
		m := make(map[string]any, len(keys))
		for _, k := range keys {
			m[k] = nil
		}
		return m
	}
	meta := map[string]any{}
	if len(labels) > 0 {
		meta["labels"] = nulls(labels)
	}
	if len(annotations) > 0 {
		meta["annotations"] = nulls(annotations)
	}
	raw, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		panic("controller: marshal a label patch: " + err.Error()) // plain maps
	}
	return raw
}

// writeUpgrade carries the decision out: each node's keys (applyNodeKeys), the evictions and
// the forced deletions. It writes nothing for a node that already shows what is wanted.
func (r *SlicerReconciler) writeUpgrade(ctx context.Context, o render.Options, round *upgradeRound) error {
	log := logf.FromContext(ctx)
	var errs []error
	// Nodes leaving the rollout first, then the others: a node starting in this round never
	// shows under way beside the one it replaces (maxUnavailable).
	order := append([]driverupgrade.NodeDecision(nil), round.decision.Nodes...)
	sort.SliceStable(order, func(i, j int) bool { return leaving(round, order[i]) && !leaving(round, order[j]) })
	for _, nd := range order {
		n := round.nodes[nd.Node]
		if n == nil {
			continue
		}
		wrote, err := r.applyNodeKeys(ctx, o, n, wantedKeys(o, nd.Want))
		switch {
		case apierrors.IsNotFound(err):
			continue // the node is gone, and its labels with it
		case err != nil:
			errs = append(errs, fmt.Errorf("driver upgrade labels of node %s: %w", n.Name, err))
			continue
		case wrote:
			log.Info("driver upgrade", "node", n.Name, "step", nd.Want.Step, "version", nd.Want.ModuleVersion, "why", nd.Message)
		}
		for _, p := range nd.Evict {
			errs = append(errs, r.evict(ctx, p, n.Name))
		}
		for _, p := range nd.Delete {
			uid := p.UID
			err := r.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}, client.Preconditions{UID: &uid})
			switch {
			case err == nil:
				log.Info("driver upgrade: deleted a pod past the drain timeout", "node", n.Name, "pod", p.NamespacedName)
			case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
				errs = append(errs, fmt.Errorf("delete pod %s on node %s: %w", p, n.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// leaving reports whether a decision takes a node under way out of the rollout.
func leaving(round *upgradeRound, nd driverupgrade.NodeDecision) bool {
	n := round.nodes[nd.Node]
	return n != nil && n.Labels[slicerv1alpha1.LabelDriverUpgrade] != "" && nd.Want.Step == ""
}

// evict evicts a pod through the Eviction API, with a UID precondition. A disruption
// budget that allows no disruption now (429) is no error: the next round tries again, and the
// drain timeout decides.
func (r *SlicerReconciler) evict(ctx context.Context, p driverupgrade.Pod, node string) error {
	uid := p.UID
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
	err := r.Client.SubResource("eviction").Create(ctx, pod, ev)
	switch {
	case err == nil:
		logf.FromContext(ctx).Info("driver upgrade: evicted", "node", node, "pod", p.NamespacedName)
		return nil
	case apierrors.IsTooManyRequests(err):
		logf.FromContext(ctx).Info("driver upgrade: eviction refused by a disruption budget; retrying", "node", node, "pod", p.NamespacedName)
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil
	default:
		return fmt.Errorf("evict pod %s on node %s: %w", p, node, err)
	}
}

// removeUpgradeLabels takes the upgrade's labels and annotation, and the module-version label
// of Slicer's Module, off every node (the uninstall's last step, once the Module is gone:
// KMM then drops its own version labels): an apply of no key under the upgrade's manager,
// then a patch for what another manager holds too (applyNodeKeys).
func (r *SlicerReconciler) removeUpgradeLabels(ctx context.Context, o render.Options) error {
	moduleLabel := render.KMMModuleVersionLabel(o.AgentNamespace, render.ModuleName)
	none := nodeKeys{manager: DriverUpgradeFieldManager}
	seen := map[string]bool{}
	var errs []error
	for _, sel := range []client.ListOption{client.HasLabels{slicerv1alpha1.LabelDriverUpgrade}, client.HasLabels{moduleLabel}} {
		var list corev1.NodeList
		if err := r.apiReader().List(ctx, &list, sel); err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		for i := range list.Items {
			n := &list.Items[i]
			if seen[n.Name] {
				continue
			}
			seen[n.Name] = true
			if _, err := r.applyNodeKeys(ctx, o, n, none); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("remove the driver upgrade labels of node %s: %w", n.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}
