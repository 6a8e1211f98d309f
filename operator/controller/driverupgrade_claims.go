package controller

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/operator/driverupgrade"
)

// nodeClaim is a ResourceClaim allocated devices of Slicer's DRA driver on a node (the
// driver's pool is its node: device-plugin/dra/driver.go).
type nodeClaim struct {
	node     string
	pods     []driverupgrade.Pod
	deleting bool
}

// driverClaims lists the claims of Slicer's DRA driver with the node of their devices and the
// pods they are reserved for (uncached: the manager's cache holds no claim). None without the
// resource.k8s.io API.
func (r *SlicerReconciler) driverClaims(ctx context.Context) ([]nodeClaim, error) {
	var claims resourceapi.ResourceClaimList
	switch err := r.apiReader().List(ctx, &claims); {
	case meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("list ResourceClaims: %w", err)
	}
	var out []nodeClaim
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Status.Allocation == nil {
			continue
		}
		node := ""
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver == migdra.DriverName {
				node = res.Pool
				break
			}
		}
		if node == "" {
			continue
		}
		nc := nodeClaim{node: node, deleting: c.DeletionTimestamp != nil}
		for _, ref := range c.Status.ReservedFor {
			if ref.APIGroup == "" && ref.Resource == "pods" {
				nc.pods = append(nc.pods, driverupgrade.Pod{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: ref.Name}, UID: ref.UID})
			}
		}
		out = append(out, nc)
	}
	return out, nil
}
