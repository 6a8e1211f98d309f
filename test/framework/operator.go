package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// OperatorServiceAccount is the operator's ServiceAccount in tests.
const OperatorServiceAccount = slicerv1alpha1.OperatorName

// InstallOperatorRBAC creates the operator's ServiceAccount in namespace and
// binds it to the roles generated from the operator's kubebuilder markers
// (config/rbac/role.yaml). The namespaced Roles in that file are installed
// into namespace.
func InstallOperatorRBAC(ctx context.Context, c client.Client, namespace string) error {
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		return fmt.Errorf("read generated RBAC: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: OperatorServiceAccount, Namespace: namespace}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount: %w", err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: OperatorServiceAccount, Namespace: namespace}}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var probe struct {
			Kind string `json:"kind"`
		}
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("decode generated RBAC: %w", err)
		}
		if doc == nil {
			continue
		}
		probe.Kind, _ = doc["kind"].(string)
		js, err := jsonOf(doc)
		if err != nil {
			return err
		}
		switch probe.Kind {
		case "ClusterRole":
			cr := &rbacv1.ClusterRole{}
			if err := utilyaml.Unmarshal(js, cr); err != nil {
				return fmt.Errorf("decode ClusterRole: %w", err)
			}
			if err := createOrUpdate(ctx, c, cr); err != nil {
				return err
			}
			crb := &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
				Subjects:   subject,
			}
			if err := createOrUpdate(ctx, c, crb); err != nil {
				return err
			}
		case "Role":
			r := &rbacv1.Role{}
			if err := utilyaml.Unmarshal(js, r); err != nil {
				return fmt.Errorf("decode Role: %w", err)
			}
			r.Namespace = namespace
			if err := createOrUpdate(ctx, c, r); err != nil {
				return err
			}
			rb := &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: namespace},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name},
				Subjects:   subject,
			}
			if err := createOrUpdate(ctx, c, rb); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected kind %q in generated RBAC", probe.Kind)
		}
	}
}

func createOrUpdate(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Create(ctx, obj); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// ImpersonatedConfig returns cfg acting as the ServiceAccount namespace/name,
// so a test exercises exactly the RBAC the ServiceAccount was granted.
func ImpersonatedConfig(cfg *rest.Config, namespace, name string) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return out
}

// MarkWorkloadsAvailable plays kube-controller-manager (envtest has none):
// it reports every Deployment and DaemonSet in namespaces as rolled out
// and available with all replicas (DaemonSets: on no node). It returns how
// many it changed.
func MarkWorkloadsAvailable(ctx context.Context, c client.Client, namespaces ...string) (int, error) {
	changed := 0
	for _, ns := range namespaces {
		var deps appsv1.DeploymentList
		if err := c.List(ctx, &deps, client.InNamespace(ns)); err != nil {
			return changed, fmt.Errorf("list Deployments: %w", err)
		}
		for i := range deps.Items {
			d := &deps.Items[i]
			n := int32(1)
			if d.Spec.Replicas != nil {
				n = *d.Spec.Replicas
			}
			if d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == n {
				continue
			}
			d.Status = appsv1.DeploymentStatus{
				ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
				Conditions: []appsv1.DeploymentCondition{{
					Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
					LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now(),
				}},
			}
			if err := c.Status().Update(ctx, d); err != nil && !apierrors.IsConflict(err) {
				return changed, fmt.Errorf("update Deployment status: %w", err)
			}
			changed++
		}
		var dss appsv1.DaemonSetList
		if err := c.List(ctx, &dss, client.InNamespace(ns)); err != nil {
			return changed, fmt.Errorf("list DaemonSets: %w", err)
		}
		for i := range dss.Items {
			d := &dss.Items[i]
			if d.Status.ObservedGeneration == d.Generation {
				continue
			}
			d.Status = appsv1.DaemonSetStatus{ObservedGeneration: d.Generation}
			if err := c.Status().Update(ctx, d); err != nil && !apierrors.IsConflict(err) {
				return changed, fmt.Errorf("update DaemonSet status: %w", err)
			}
			changed++
		}
	}
	return changed, nil
}

func jsonOf(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return b, nil
}
