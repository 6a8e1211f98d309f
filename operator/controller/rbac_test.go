package controller

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// operatorClusterWrites are the operator's cluster-wide write permissions, as
// "group/resource verb" ("" group: core; "[names]" when limited by resourceNames). Each one
// lets a compromised operator write such objects anywhere in the cluster
// (docs/design/threat-model.md), so a new one must be added here on purpose, after asking
// whether a namespaced Role (+kubebuilder:rbac:...,namespace=) or resourceNames would do.
// Most are here because the operator grants them to the scheduler or the agent, and
// Kubernetes lets only a holder grant a permission (operator/render/rbac.go).
var operatorClusterWrites = []string{
	"/bindings create", "/configmaps create", "/configmaps delete", "/configmaps patch", "/configmaps update",
	"/events create", "/events patch", "/events update",
	"/namespaces create", "/namespaces delete", "/namespaces patch", "/namespaces update",
	"/pods delete", "/pods/binding create", "/pods/finalizers update", "/pods/status patch", "/pods/status update",
	"/serviceaccounts create", "/serviceaccounts delete", "/serviceaccounts patch", "/serviceaccounts update",
	"/services create", "/services delete", "/services patch", "/services update",
	"admissionregistration.k8s.io/mutatingwebhookconfigurations create", "admissionregistration.k8s.io/mutatingwebhookconfigurations delete",
	"admissionregistration.k8s.io/mutatingwebhookconfigurations patch", "admissionregistration.k8s.io/mutatingwebhookconfigurations update",
	"admissionregistration.k8s.io/validatingadmissionpolicies create", "admissionregistration.k8s.io/validatingadmissionpolicies delete",
	"admissionregistration.k8s.io/validatingadmissionpolicies patch", "admissionregistration.k8s.io/validatingadmissionpolicies update",
	"admissionregistration.k8s.io/validatingadmissionpolicybindings create", "admissionregistration.k8s.io/validatingadmissionpolicybindings delete",
	"admissionregistration.k8s.io/validatingadmissionpolicybindings patch", "admissionregistration.k8s.io/validatingadmissionpolicybindings update",
	"apps/daemonsets create", "apps/daemonsets delete", "apps/daemonsets patch", "apps/daemonsets update",
	"apps/deployments create", "apps/deployments delete", "apps/deployments patch", "apps/deployments update",
	"authentication.k8s.io/tokenreviews create", "authorization.k8s.io/subjectaccessreviews create",
	"cert-manager.io/certificates create", "cert-manager.io/certificates delete", "cert-manager.io/certificates patch", "cert-manager.io/certificates update",
	"cert-manager.io/issuers create", "cert-manager.io/issuers delete", "cert-manager.io/issuers patch", "cert-manager.io/issuers update",
	"events.k8s.io/events create", "events.k8s.io/events patch", "events.k8s.io/events update",
	"kmm.sigs.x-k8s.io/modules create", "kmm.sigs.x-k8s.io/modules delete", "kmm.sigs.x-k8s.io/modules patch", "kmm.sigs.x-k8s.io/modules update",
	"monitoring.coreos.com/prometheusrules create", "monitoring.coreos.com/prometheusrules delete", "monitoring.coreos.com/prometheusrules patch", "monitoring.coreos.com/prometheusrules update",
	"monitoring.coreos.com/servicemonitors create", "monitoring.coreos.com/servicemonitors delete", "monitoring.coreos.com/servicemonitors patch", "monitoring.coreos.com/servicemonitors update",
	"nfd.k8s-sigs.io/nodefeaturerules create", "nfd.k8s-sigs.io/nodefeaturerules delete", "nfd.k8s-sigs.io/nodefeaturerules patch", "nfd.k8s-sigs.io/nodefeaturerules update",
	"policy/poddisruptionbudgets create", "policy/poddisruptionbudgets delete", "policy/poddisruptionbudgets patch", "policy/poddisruptionbudgets update",
	"rbac.authorization.k8s.io/clusterrolebindings create", "rbac.authorization.k8s.io/clusterrolebindings delete", "rbac.authorization.k8s.io/clusterrolebindings patch", "rbac.authorization.k8s.io/clusterrolebindings update",
	"rbac.authorization.k8s.io/clusterroles create", "rbac.authorization.k8s.io/clusterroles delete", "rbac.authorization.k8s.io/clusterroles patch", "rbac.authorization.k8s.io/clusterroles update",
	"rbac.authorization.k8s.io/rolebindings create", "rbac.authorization.k8s.io/rolebindings delete", "rbac.authorization.k8s.io/rolebindings patch", "rbac.authorization.k8s.io/rolebindings update",
	"rbac.authorization.k8s.io/roles create", "rbac.authorization.k8s.io/roles delete", "rbac.authorization.k8s.io/roles patch", "rbac.authorization.k8s.io/roles update",
	"resource.k8s.io/deviceclasses create", "resource.k8s.io/deviceclasses delete", "resource.k8s.io/deviceclasses patch", "resource.k8s.io/deviceclasses update",
	"resource.k8s.io/resourceclaims create", "resource.k8s.io/resourceclaims delete", "resource.k8s.io/resourceclaims patch", "resource.k8s.io/resourceclaims update",
	"resource.k8s.io/resourceclaims/binding patch", "resource.k8s.io/resourceclaims/binding update",
	"resource.k8s.io/resourceclaims/status patch", "resource.k8s.io/resourceclaims/status update",
	"resource.k8s.io/resourceslices create", "resource.k8s.io/resourceslices delete", "resource.k8s.io/resourceslices deletecollection",
	"resource.k8s.io/resourceslices update",
	"slicer.dev/nodeaccelerators create", "slicer.dev/nodeaccelerators/status patch",
	"slicer.dev/sliceallocations create", "slicer.dev/sliceallocations delete", "slicer.dev/sliceallocations patch",
	"slicer.dev/sliceallocations/status patch",
	"slicer.dev/slicers patch", "slicer.dev/slicers update", "slicer.dev/slicers/finalizers update",
	"slicer.dev/slicers/status patch", "slicer.dev/slicers/status update",
}

// readVerbs are the verbs that write nothing.
var readVerbs = []string{"get", "list", "watch"}

// TestOperatorClusterWideWrites lists the write permissions of the operator's ClusterRole,
// generated from the RBAC markers (config/rbac/role.yaml, `make manifests`; the bundle's CSV
// embeds the same rules), and fails on any not in operatorClusterWrites, and on any listed
// that it no longer holds (so the list stays the truth).
func TestOperatorClusterWideWrites(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	found := false
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var cr rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &cr); err != nil {
			t.Fatal(err)
		}
		if cr.Kind != "ClusterRole" {
			continue
		}
		found = true
		for _, r := range cr.Rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if slices.Contains(readVerbs, v) || v == "use" && len(r.ResourceNames) > 0 {
							continue
						}
						p := g + "/" + res + " " + v
						if len(r.ResourceNames) > 0 {
							p += " " + "[" + strings.Join(r.ResourceNames, ",") + "]"
						}
						got = append(got, p)
					}
				}
			}
		}
	}
	if !found {
		t.Fatal("config/rbac/role.yaml has no ClusterRole")
	}
	slices.Sort(got)
	got = slices.Compact(got)
	want := slices.Clone(operatorClusterWrites)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the operator's cluster-wide writes changed (-listed +generated): a new one needs a reason in operatorClusterWrites, "+
			"or a namespaced Role (+kubebuilder:rbac:...,namespace=) or resourceNames instead:\n%s", diff)
	}
}
