package framework

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// BindTenant binds user to the built-in ClusterRole role (admin, edit, view) in namespace,
// as a namespace's tenants are bound, and returns a config impersonating that user. envtest
// runs no kube-controller-manager, whose aggregation controller fills the aggregated roles: the
// rules of the ClusterRoles that aggregate into role are copied into it first (what that
// controller would write), so the tenant holds exactly what it holds on a cluster.
func BindTenant(ctx context.Context, c client.Client, cfg *rest.Config, namespace, user, role string) (*rest.Config, error) {
	var cr rbacv1.ClusterRole
	if err := c.Get(ctx, client.ObjectKey{Name: role}, &cr); err != nil {
		return nil, fmt.Errorf("read ClusterRole %s: %w", role, err)
	}
	if cr.AggregationRule != nil && len(cr.Rules) == 0 {
		for _, sel := range cr.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return nil, fmt.Errorf("ClusterRole %s: %w", role, err)
			}
			var list rbacv1.ClusterRoleList
			if err := c.List(ctx, &list, client.MatchingLabelsSelector{Selector: s}); err != nil {
				return nil, fmt.Errorf("list the roles aggregated into %s: %w", role, err)
			}
			for _, r := range list.Items {
				cr.Rules = append(cr.Rules, r.Rules...)
			}
		}
		if err := c.Update(ctx, &cr); err != nil {
			return nil, fmt.Errorf("aggregate ClusterRole %s: %w", role, err)
		}
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, rb)); err != nil {
		return nil, fmt.Errorf("bind %s to %s in %s: %w", user, role, namespace, err)
	}
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	return out, nil
}
