package dra

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// The allocated claims, the API's half of the state (state.go), are read from a shared
// informer's memory, never listed per call. The cache may lag the API; the rules that keep
// that safe:
//   - Prepare merges the claims the kubelet hands it (read live by the helper) over the
//     cache, and a double allocation the cache shows is confirmed with a live read before
//     the claim is failed (a claim deleted a moment ago may still be cached);
//   - Unprepare keeps an instance another claim's CDI spec records (a claim prepared a
//     moment ago may not be cached yet);
//   - orphans and specs of claims no longer allocated are only collected after the grace
//     period, which covers the lag;
//   - a change to a claim of this pool asks for a sync, so the NodeAccelerator and the pool
//     follow the cache once it catches up.

// startClaims starts the claim informer and waits for its first list.
func (d *Driver) startClaims(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(d.opts.Client, 0, informers.WithTransform(stripManagedFields))
	inf := f.Resource().V1().ResourceClaims()
	poke := func(obj any) {
		if d.inPool(obj) {
			d.poke()
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(old, cur any) { poke(old); poke(cur) },
		DeleteFunc: poke,
	}); err != nil {
		return fmt.Errorf("claim informer: %w", err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("claim informer: %v not synced", typ)
		}
	}
	d.mu.Lock()
	d.claimLister = inf.Lister()
	d.mu.Unlock()
	return nil
}

// stripManagedFields drops what the plugin never reads from the cached claims.
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// inPool reports whether a claim (or its tombstone) is allocated a device of this pool.
func (d *Driver) inPool(obj any) bool {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	c, ok := obj.(*resourceapi.ResourceClaim)
	return ok && len(migdra.AllocatedDevices(c, d.opts.NodeName)) > 0
}

// claims are the cached claims of the cluster (shared with the informer: read only), with
// given (read live) in place of their cached copies. Called with mu held.
func (d *Driver) claims(given ...*resourceapi.ResourceClaim) ([]*resourceapi.ResourceClaim, error) {
	if d.claimLister == nil {
		return nil, errors.New("claim cache not started")
	}
	cached, err := d.claimLister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list cached resource claims: %w", err)
	}
	if len(given) == 0 {
		return cached, nil
	}
	out := append([]*resourceapi.ResourceClaim(nil), given...)
	seen := map[string]bool{}
	for _, c := range given {
		seen[string(c.UID)] = true
	}
	for _, c := range cached {
		if !seen[string(c.UID)] {
			out = append(out, c)
		}
	}
	return out, nil
}

// stillHolds reports whether the API (read live) still has the claim with uid among claims
// allocated device of this pool: it confirms a double allocation the cache shows.
func (d *Driver) stillHolds(ctx context.Context, claims []*resourceapi.ResourceClaim, uid, device string) (bool, error) {
	for _, c := range claims {
		if string(c.UID) != uid {
			continue
		}
		live, err := d.opts.Client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("get claim %s/%s: %w", c.Namespace, c.Name, err)
		}
		// A claim recreated under the name has another UID, so it is not among the holders.
		for _, h := range explained([]*resourceapi.ResourceClaim{live}, d.opts.NodeName)[device] {
			if h == uid {
				return true, nil
			}
		}
		return false, nil
	}
	return false, nil
}
