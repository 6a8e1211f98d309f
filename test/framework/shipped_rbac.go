package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// shippedRBACFile is the hand-written RBAC the manifests ship next to the
// generated role.yaml: the operator's bindings and slicer-metrics-reader.
var shippedRBACFile = filepath.Join("config", "rbac", "service_account_binding.yaml")

// ShippedClusterRole is the ClusterRole name of config/rbac/service_account_binding.yaml,
// as installed, so that a test grants exactly what the manifests grant.
func ShippedClusterRole(name string) (*rbacv1.ClusterRole, error) {
	data, err := os.ReadFile(filepath.Join(RepoRoot(), shippedRBACFile))
	if err != nil {
		return nil, fmt.Errorf("read shipped RBAC: %w", err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var r rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
			return nil, fmt.Errorf("decode %s: %w", shippedRBACFile, err)
		}
		if r.Kind == "ClusterRole" && r.Name == name {
			return &r, nil
		}
	}
	return nil, fmt.Errorf("no ClusterRole %s in %s", name, shippedRBACFile)
}
