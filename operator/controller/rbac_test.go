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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/kubeversion"
	"github.com/slicer-operator/slicer/operator/render"
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
	// Nodes: only the NVIDIA GPU operator's deploy labels on Slicer's nodes, in Preinstalled
	// mode (controller/gpuoperator.go), held to those keys by the operator node guard
	// (render/operatornodeguard.go); no create, no delete, no status.
	"/nodes patch",
	// pods/eviction: granted to the scheduler, whose defragmentation (Evict mode) moves pods
	// through the Eviction API, PodDisruptionBudgets enforced (scheduler/plugin/defrag_evict.go).
	"/pods delete", "/pods/eviction create", "/pods/binding create", "/pods/finalizers update", "/pods/status patch", "/pods/status update",
	// ResourceQuotas: the agent namespace's that admits its pods at their critical priority
	// (spec.priority.criticalPriorityQuota; render/placement.go); the namespace is the
	// operator's --agent-namespace, not known to a Role's markers.
	"/resourcequotas create", "/resourcequotas delete", "/resourcequotas patch", "/resourcequotas update",
	"/serviceaccounts create", "/serviceaccounts delete", "/serviceaccounts patch", "/serviceaccounts update",
	"/services create", "/services delete", "/services patch", "/services update",
	"admissionregistration.k8s.io/mutatingwebhookconfigurations create", "admissionregistration.k8s.io/mutatingwebhookconfigurations delete [slicer-agent-node-guard,slicer-allocation-guard,slicer-device-access,slicer-mig-pods,slicer-operator-node-guard]",
	"admissionregistration.k8s.io/mutatingwebhookconfigurations patch [slicer-agent-node-guard,slicer-allocation-guard,slicer-device-access,slicer-mig-pods,slicer-operator-node-guard]", "admissionregistration.k8s.io/mutatingwebhookconfigurations update [slicer-agent-node-guard,slicer-allocation-guard,slicer-device-access,slicer-mig-pods,slicer-operator-node-guard]",
	"admissionregistration.k8s.io/validatingadmissionpolicies create", "admissionregistration.k8s.io/validatingadmissionpolicies delete [slicer-agent-node-guard,slicer-allocation-guard,slicer-device-access,slicer-mig-pods,slicer-operator-node-guard]",
	"admissionregistration.k8s.io/validatingadmissionpolicies patch [slicer-agent-node-guard,slicer-allocation-guard,slicer-device-access,slicer-mig-pods,slicer-operator-node-guard]", "admissionregistration.k8s.io/validatingadmissionpolicies update [slicer-agent-node-guard,slicer-allocation-guard,slicer-device-access,slicer-mig-pods,slicer-operator-node-guard]",
	"admissionregistration.k8s.io/validatingadmissionpolicybindings create", "admissionregistration.k8s.io/validatingadmissionpolicybindings delete [slicer-agent-node-guard,slicer-allocation-guard,slicer-device-access,slicer-mig-pods,slicer-operator-node-guard]",
	"admissionregistration.k8s.io/validatingadmissionpolicybindings patch [slicer-agent-node-guard,slicer-allocation-guard,slicer-device-access,slicer-mig-pods,slicer-operator-node-guard]", "admissionregistration.k8s.io/validatingadmissionpolicybindings update [slicer-agent-node-guard,slicer-allocation-guard,slicer-device-access,slicer-mig-pods,slicer-operator-node-guard]",
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
	"rbac.authorization.k8s.io/clusterrolebindings create", "rbac.authorization.k8s.io/clusterrolebindings delete [slicer-agent,slicer-scheduler,slicer-webhook]",
	"rbac.authorization.k8s.io/clusterrolebindings patch [slicer-agent,slicer-scheduler,slicer-webhook]", "rbac.authorization.k8s.io/clusterrolebindings update [slicer-agent,slicer-scheduler,slicer-webhook]",
	"rbac.authorization.k8s.io/clusterroles create", "rbac.authorization.k8s.io/clusterroles delete [slicer-agent,slicer-scheduler,slicer-webhook]",
	"rbac.authorization.k8s.io/clusterroles patch [slicer-agent,slicer-scheduler,slicer-webhook]", "rbac.authorization.k8s.io/clusterroles update [slicer-agent,slicer-scheduler,slicer-webhook]",
	"rbac.authorization.k8s.io/rolebindings create", "rbac.authorization.k8s.io/rolebindings delete", "rbac.authorization.k8s.io/rolebindings patch", "rbac.authorization.k8s.io/rolebindings update",
	"rbac.authorization.k8s.io/roles create", "rbac.authorization.k8s.io/roles delete", "rbac.authorization.k8s.io/roles patch", "rbac.authorization.k8s.io/roles update",
	// DeviceTaintRules: the DRA frontend's fence of a node under a driver upgrade, one per node
	// under way, named slicer-driver-upgrade-<node> (controller/driverupgrade.go, fenceDRA).
	"resource.k8s.io/devicetaintrules create", "resource.k8s.io/devicetaintrules delete", "resource.k8s.io/devicetaintrules patch", "resource.k8s.io/devicetaintrules update",
	"resource.k8s.io/deviceclasses create", "resource.k8s.io/deviceclasses delete", "resource.k8s.io/deviceclasses patch", "resource.k8s.io/deviceclasses update",
	"resource.k8s.io/resourceclaims create", "resource.k8s.io/resourceclaims delete", "resource.k8s.io/resourceclaims patch", "resource.k8s.io/resourceclaims update",
	"resource.k8s.io/resourceclaims/binding patch", "resource.k8s.io/resourceclaims/binding update",
	"resource.k8s.io/resourceclaims/status patch", "resource.k8s.io/resourceclaims/status update",
	"resource.k8s.io/resourceslices create", "resource.k8s.io/resourceslices delete", "resource.k8s.io/resourceslices deletecollection",
	"resource.k8s.io/resourceslices update",
	"slicer.dev/nodeaccelerators create", "slicer.dev/nodeaccelerators delete", // the uninstall deletes every node's (teardownSteps)
	"slicer.dev/nodeaccelerators/status patch",
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
	var got []string
	for _, r := range operatorClusterRules(t) {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if slices.Contains(readVerbs, v) || v == "use" && len(r.ResourceNames) > 0 {
						continue
					}
					p := g + "/" + res + " " + v
					if len(r.ResourceNames) > 0 {
						p += " [" + strings.Join(slices.Sorted(slices.Values(r.ResourceNames)), ",") + "]"
					}
					got = append(got, p)
				}
			}
		}
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

// Where the operator may change and delete a kind of cluster-scoped object only by name,
// every such object it renders or deletes (either frontend, OpenShift or not) is named there.
func TestOperatorResourceNamesCoverItsObjects(t *testing.T) {
	byName := map[string][]string{} // resource -> names it may update, patch and delete
	for _, r := range operatorClusterRules(t) {
		if len(r.ResourceNames) > 0 && slices.Contains(r.Verbs, "patch") && slices.Contains(r.Verbs, "delete") {
			for _, res := range r.Resources {
				byName[res] = append(byName[res], r.ResourceNames...)
			}
		}
	}
	if len(byName) == 0 {
		t.Fatal("no resource is limited by name")
	}
	r := &SlicerReconciler{Admission: render.Admission}
	seen := map[string]bool{}
	for _, dra := range []bool{false, true} {
		for _, openShift := range []bool{false, true} {
			s := &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}}
			if dra {
				s.Spec.Frontend = slicerv1alpha1.FrontendDRA
			}
			o := render.Options{Slicer: s, Namespace: "op", AgentNamespace: "op-agent", Ports: render.DefaultPorts(), CABundle: []byte("ca"),
				Kubernetes: kubeversion.Version{Minor: kubeversion.Supported[len(kubeversion.Supported)-1]}}
			o.Platform.OpenShift = openShift
			for _, obj := range r.cleanupTargets(o) {
				if obj.GetNamespace() != "" {
					continue
				}
				res := resourceOf(obj.GetObjectKind().GroupVersionKind().Kind)
				names, limited := byName[res]
				if !limited {
					continue
				}
				seen[res] = true
				if !slices.Contains(names, obj.GetName()) {
					t.Errorf("%s %q is not among the names the operator may change (%v): add it to the RBAC marker (slicer_controller.go)", res, obj.GetName(), names)
				}
			}
		}
	}
	for res := range byName {
		if !seen[res] {
			t.Errorf("no %s among the objects checked: the test lost its subject", res)
		}
	}
}

// resourceOf is the resource of a kind (the kinds above: regular English plurals).
func resourceOf(kind string) string {
	k := strings.ToLower(kind)
	switch {
	case strings.HasSuffix(k, "y"):
		return strings.TrimSuffix(k, "y") + "ies"
	case strings.HasSuffix(k, "s"):
		return k + "es"
	}
	return k + "s"
}

// TestOperatorHoldsWhatItGrants: Kubernetes lets the operator grant a permission in a Role or
// ClusterRole only when it holds it itself (no escalate verb), so every rule it renders for
// its components (every frontend, OpenShift or not, every supported minor) must be covered by
// its own generated rules; otherwise the apply of that role fails on a live cluster only.
func TestOperatorHoldsWhatItGrants(t *testing.T) {
	cluster, namespaced := operatorRoles(t)
	covers := func(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
		for _, r := range rules {
			if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
				(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
				(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) &&
				(len(r.ResourceNames) == 0 || name != "" && slices.Contains(r.ResourceNames, name)) {
				return true
			}
		}
		return false
	}
	checked := 0
	for _, minor := range kubeversion.Supported {
		for _, dra := range []bool{false, true} {
			for _, openShift := range []bool{false, true} {
				s := &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}}
				if dra {
					s.Spec.Frontend = slicerv1alpha1.FrontendDRA
				}
				o := render.Options{Slicer: s, Namespace: "slicer-system", AgentNamespace: "slicer-agent", Ports: render.DefaultPorts(),
					CABundle: []byte("ca"), Kubernetes: kubeversion.Version{Minor: minor}}
				o.Platform.OpenShift = openShift
				for _, obj := range render.RBAC(o) {
					var rules []rbacv1.PolicyRule
					ns := ""
					switch r := obj.(type) {
					case *rbacv1.ClusterRole:
						rules = r.Rules
					case *rbacv1.Role:
						rules, ns = r.Rules, r.Namespace
					default:
						continue
					}
					for _, rule := range rules {
						for _, g := range rule.APIGroups {
							for _, res := range rule.Resources {
								for _, v := range rule.Verbs {
									names := rule.ResourceNames
									if len(names) == 0 {
										names = []string{""}
									}
									for _, n := range names {
										checked++
										if !covers(cluster, g, res, v, n) && !covers(namespaced[ns], g, res, v, n) {
											t.Errorf("%s %s grants %s/%s %s %s, which the operator does not hold (minor %s, DRA %v, OpenShift %v): add it to the RBAC markers (slicer_controller.go)",
												obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), g, res, v, n, minor, dra, openShift)
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no rendered rule was checked: the test lost its subject")
	}
}

// operatorClusterRules are the rules of the operator's generated ClusterRole.
func operatorClusterRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	cluster, _ := operatorRoles(t)
	if len(cluster) == 0 {
		t.Fatal("config/rbac/role.yaml has no ClusterRole")
	}
	return cluster
}

// operatorRoles are the operator's generated ClusterRole rules and its namespaced Roles'
// rules by namespace (config/rbac/role.yaml).
func operatorRoles(t *testing.T) ([]rbacv1.PolicyRule, map[string][]rbacv1.PolicyRule) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	namespaced := map[string][]rbacv1.PolicyRule{}
	var cluster []rbacv1.PolicyRule
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var r rbacv1.Role
		if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatal(err)
		}
		switch r.Kind {
		case "ClusterRole":
			cluster = append(cluster, r.Rules...)
		case "Role":
			namespaced[r.Namespace] = append(namespaced[r.Namespace], r.Rules...)
		}
	}
	return cluster, namespaced
}
