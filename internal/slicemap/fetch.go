package slicemap

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// pageSize bounds each List call so that a large cluster is read in pages.
const pageSize = 500

// Fetch lists what Build needs. With node set it reads only that NodeAccelerator (a missing
// one is not an error: the map then shows the node's allocations under "no NodeAccelerator").
// SliceAllocations, pods, the nodes under a driver upgrade, the scheduler's DefragmentationPlanned Events, ResourceClaims and
// ResourceClaimTemplates are listed in all namespaces, in pages; the last two only where the apiserver serves resource.k8s.io/v1 (a
// cluster without DRA has neither, and that is not an error).
func Fetch(ctx context.Context, r client.Reader, node string) (Input, error) {
	var in Input
	if node != "" {
		var na slicerv1alpha1.NodeAccelerator
		switch err := r.Get(ctx, client.ObjectKey{Name: node}, &na); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return Input{}, fmt.Errorf("get NodeAccelerator %s: %w", node, err)
		default:
			in.NodeAccelerators = []slicerv1alpha1.NodeAccelerator{na}
		}
	} else {
		var list slicerv1alpha1.NodeAcceleratorList
		if err := listPages(ctx, r, &list, func() { in.NodeAccelerators = append(in.NodeAccelerators, list.Items...) }); err != nil {
			return Input{}, fmt.Errorf("list NodeAccelerators: %w", err)
		}
	}
	var allocs slicerv1alpha1.SliceAllocationList
	if err := listPages(ctx, r, &allocs, func() { in.SliceAllocations = append(in.SliceAllocations, allocs.Items...) }); err != nil {
		return Input{}, fmt.Errorf("list SliceAllocations: %w", err)
	}
	var pods corev1.PodList
	if err := listPages(ctx, r, &pods, func() { in.Pods = append(in.Pods, pods.Items...) }); err != nil {
		return Input{}, fmt.Errorf("list pods: %w", err)
	}
	var upgrading corev1.NodeList
	if err := listPages(ctx, r, &upgrading, func() { in.UpgradingNodes = append(in.UpgradingNodes, upgrading.Items...) }, client.HasLabels{slicerv1alpha1.LabelDriverUpgrade}); err != nil {
		return Input{}, fmt.Errorf("list the nodes under a driver upgrade: %w", err)
	}
	var events corev1.EventList
	plans := client.MatchingFields{"reason": slicerv1alpha1.EventDefragmentationPlanned}
	if err := listPages(ctx, r, &events, func() { in.Events = append(in.Events, events.Items...) }, plans); err != nil {
		return Input{}, fmt.Errorf("list %s Events: %w", slicerv1alpha1.EventDefragmentationPlanned, err)
	}
	var claims resourceapi.ResourceClaimList
	err := listPages(ctx, r, &claims, func() { in.ResourceClaims = append(in.ResourceClaims, claims.Items...) })
	if notServed(err) {
		return in, nil
	}
	if err != nil {
		return Input{}, fmt.Errorf("list ResourceClaims: %w", err)
	}
	var templates resourceapi.ResourceClaimTemplateList
	err = listPages(ctx, r, &templates, func() { in.ResourceClaimTemplates = append(in.ResourceClaimTemplates, templates.Items...) })
	if err != nil && !notServed(err) {
		return Input{}, fmt.Errorf("list ResourceClaimTemplates: %w", err)
	}
	return in, nil
}

// notServed reports whether err says the apiserver does not serve the kind (no such group or
// version in discovery, or a 404 on the list).
func notServed(err error) bool {
	return err != nil && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err))
}

// listPages lists into list page by page, calling collect after each page.
func listPages(ctx context.Context, r client.Reader, list client.ObjectList, collect func(), opts ...client.ListOption) error {
	cont := ""
	for {
		if err := r.List(ctx, list, append([]client.ListOption{client.Limit(pageSize), client.Continue(cont)}, opts...)...); err != nil {
			return err // the caller wraps it with the kind
		}
		collect()
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}
