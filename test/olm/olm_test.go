package olm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework/procnet"
)

const (
	node = "127.0.0.1"
	// the CSV's suggested namespace (operatorframework.io/suggested-namespace) and the one
	// config/default installs into: operator, webhook and scheduler; the agent goes to
	// <namespace>-agent (docs/install.md)
	namespace      = "slicer-system"
	agentNamespace = "slicer-system-agent"
	workloads      = "olm-workloads"
	pkgName        = "slicer-operator"
	// where the emulated agent keeps its GPUs' MIG instances (operator/render: EmulatedStateDir)
	emulatedStateFile = "/var/lib/slicer/emulated-gpus.json"
	wait              = 3 * time.Minute
)

var (
	subscriptionGVK  = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "Subscription"}
	csvGVK           = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "ClusterServiceVersion"}
	installPlanGVK   = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "InstallPlan"}
	catalogSourceGVK = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "CatalogSource"}
	operatorGroupGVK = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1", Kind: "OperatorGroup"}

	listenersBefore []string
)

// The MIG pods that run through the upgrade, and what must not change under them.
var slicePods = map[string]string{"train-7g": "7g.80gb", "infer-3g": "3g.20gb"}

type podState struct {
	UID      types.UID
	Restarts int32
}

type allocationState struct {
	UID     types.UID
	Spec    slicerv1alpha1.SliceAllocationSpec
	MIGUUID string
	State   slicerv1alpha1.AllocationState
}

var _ = Describe("Slicer under OLM", Ordered, func() {
	var (
		pods        map[string]podState
		allocations map[string]allocationState
		instances   []string
	)

	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			diagnose(ctx)
		}
	})

	It("installs the bundle to upgrade from through a Subscription in slicer-system", func(ctx SpecContext) {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
		// spec {}: all namespaces, the install mode the CSV supports
		create(ctx, obj(operatorGroupGVK, namespace, "all-namespaces", map[string]any{}))
		create(ctx, obj(catalogSourceGVK, "olm", "slicer-catalog", map[string]any{
			"sourceType": "grpc", "address": catalogAddr, "displayName": "Slicer (test catalog)", "publisher": "test",
		}))
		Eventually(func(g Gomega) {
			g.Expect(field(ctx, g, catalogSourceGVK, "olm", "slicer-catalog", "status", "connectionState", "lastObservedState")).To(Equal("READY"))
		}).WithTimeout(time.Minute).Should(Succeed())

		start := time.Now()
		create(ctx, obj(subscriptionGVK, namespace, pkgName, map[string]any{
			"channel": "candidate", "name": pkgName, "source": "slicer-catalog", "sourceNamespace": "olm",
			"installPlanApproval": "Automatic", "startingCSV": csvName(from),
		}))
		waitInstalled(ctx, from)
		GinkgoWriter.Printf("v%s: Subscription to CSV Succeeded in %s\n", from, time.Since(start).Round(time.Millisecond))
		Expect(deploymentImage(ctx, namespace, "slicer-operator")).To(Equal(image("operator", from)))
	})

	It("reconciles the emulated Slicer and serves MIG pods", func(ctx SpecContext) {
		// What NFD would set; this suite runs without NFD (the v0.1.0 operator has no opt-out,
		// the others are told nodeFeatureRule: Disabled).
		kubectl(ctx, "label", "node", node, slicerv1alpha1.LabelMIGCapable+"=true", "--overwrite")
		// config/overlays/emulated's Slicer as of v0.1.0 (its CRD has neither
		// nodeSelection nor network.listenAddress; OLM_FROM=released sets them after the
		// upgrade), and as of now for the "previous" bundle
		slicer := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "slicer.dev/v1alpha1", "kind": "Slicer", "metadata": map[string]any{"name": slicerv1alpha1.SlicerName},
			"spec": map[string]any{
				"driver":    map[string]any{"mode": "Emulated"},
				"scheduler": map[string]any{"replicas": int64(1)},
				"webhook":   map[string]any{"replicas": int64(1), "certificateProvider": "SelfManaged"},
				"agent": map[string]any{"emulatedGPUs": []any{
					map[string]any{"model": "H100-80GB", "count": int64(2)},
					map[string]any{"model": "A100-40GB", "count": int64(2)},
				}},
				"network": map[string]any{"endpointMode": "HostNetwork"},
			},
		}}
		if !fromReleased {
			slicer.Object["spec"].(map[string]any)["nodeSelection"] = map[string]any{"nodeFeatureRule": "Disabled"}
			slicer.Object["spec"].(map[string]any)["network"].(map[string]any)["listenAddress"] = "127.0.0.1"
		}
		Expect(k8s.Create(ctx, slicer)).To(Succeed())
		waitComponents(ctx, slicerv1alpha1.ConditionWebhookAvailable, slicerv1alpha1.ConditionSchedulerAvailable, slicerv1alpha1.ConditionAgentAvailable)
		By("the operands where kustomize puts them: webhook and scheduler in slicer-system, the agent in slicer-system-agent")
		Expect(deploymentImage(ctx, namespace, "slicer-webhook")).To(Equal(image("webhook", from)))
		Expect(deploymentImage(ctx, namespace, "slicer-scheduler")).To(HavePrefix(image("scheduler", from)))
		var agent appsv1.DaemonSet
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "slicer-agent"}, &agent)).To(Succeed())
		Expect(agent.Spec.Template.Spec.Containers[0].Image).To(Equal(image("agent", from)))

		// v0.1.0's bug: the agent ClusterRole its operator renders (operator/render/rbac.go at
		// the release's commit) grants get/list/watch on sliceallocations, but its agent patches
		// them (a finalizer, device-plugin/agent/controller.go): forbidden, no slice ever gets
		// Ready, MIG pods stay Pending. The workaround a v0.1.0 user needs, removed after the
		// upgrade (the current release renders the verbs itself).
		if fromReleased {
			Expect(k8s.Create(ctx, v010Workaround())).To(Succeed())
			Expect(k8s.Create(ctx, v010WorkaroundBinding())).To(Succeed())
		}

		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloads}})).To(Succeed())
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: workloads, Name: "default"}, &corev1.ServiceAccount{})
		}).WithTimeout(time.Minute).Should(Succeed())
		for name, profile := range slicePods {
			p := builder.Pod(workloads, name).RestartNever().
				Container("main", builder.Limits(mig.NVIDIAResourcePrefix+profile, "1")).
				Shell(`echo "got $SLICER_MIG_DEVICE"; trap 'exit 0' TERM; sleep 86400 & wait`).Obj()
			Expect(k8s.Create(ctx, p)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for name := range slicePods {
				var p corev1.Pod
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: workloads, Name: name}, &p)).To(Succeed())
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", name)
			}
		}).WithContext(ctx).WithTimeout(wait).Should(Succeed())
		Eventually(func(g Gomega) {
			a := allocationsNow(ctx, g)
			g.Expect(a).To(HaveLen(len(slicePods)))
			for n, s := range a {
				g.Expect(s.MIGUUID).NotTo(BeEmpty(), "allocation %s has no MIG device", n)
			}
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		expectNoNewListener()
	})

	It("upgrades to the current bundle without touching the running slices", func(ctx SpecContext) {
		pods = podsNow(ctx)
		allocations = allocationsNow(ctx, Default)
		instances = migInstances()
		Expect(instances).To(HaveLen(len(slicePods)))
		agentUID := daemonSetPodUIDs(ctx)

		start := time.Now()
		By("the catalog now serves v" + from + " and v" + current + " (replaces v" + from + ")")
		startCatalogServer(catalogs["both"])
		waitInstalled(ctx, current)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: csvName(from)}, newObj(csvGVK)))
		}).WithContext(ctx).WithTimeout(wait).Should(BeTrue(), "CSV v%s is still there", from)
		Expect(field(ctx, Default, subscriptionGVK, namespace, pkgName, "status", "installedCSV")).To(Equal(csvName(current)))
		GinkgoWriter.Printf("upgrade: catalog swap to CSV v%s Succeeded and v%s gone in %s\n", current, from, time.Since(start).Round(time.Millisecond))
		Expect(deploymentImage(ctx, namespace, "slicer-operator")).To(BeElementOf(pinnedImages("operator")))
		if fromReleased {
			Expect(k8s.Delete(ctx, v010WorkaroundBinding())).To(Succeed())
			Expect(k8s.Delete(ctx, v010Workaround())).To(Succeed())

			By("the current emulated overlay's Slicer: no NFD, every listener on loopback")
			patch := []byte(`{"spec":{"nodeSelection":{"nodeFeatureRule":"Disabled"},"network":{"listenAddress":"127.0.0.1"}}}`)
			Expect(k8s.Patch(ctx, &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}},
				client.RawPatch(types.MergePatchType, patch))).To(Succeed())
		}

		By("operands rolled to the current images, pinned by digest")
		Eventually(func(g Gomega) {
			for _, c := range []string{"webhook", "scheduler"} {
				var d appsv1.Deployment
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "slicer-" + c}, &d)).To(Succeed())
				g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(BeElementOf(pinnedImages(c)))
				g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
				g.Expect(d.Status.Replicas).To(Equal(*d.Spec.Replicas), "old pods of %s still there", d.Name)
				g.Expect(d.Status.UpdatedReplicas).To(Equal(*d.Spec.Replicas))
				g.Expect(d.Status.AvailableReplicas).To(Equal(*d.Spec.Replicas))
			}
			var ds appsv1.DaemonSet
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "slicer-agent"}, &ds)).To(Succeed())
			g.Expect(ds.Spec.Template.Spec.Containers[0].Image).To(BeElementOf(pinnedImages("agent")))
			g.Expect(ds.Status.ObservedGeneration).To(Equal(ds.Generation))
			g.Expect(ds.Status.DesiredNumberScheduled).To(BeNumerically(">", 0))
			g.Expect(ds.Status.UpdatedNumberScheduled).To(Equal(ds.Status.DesiredNumberScheduled))
			g.Expect(ds.Status.NumberAvailable).To(Equal(ds.Status.DesiredNumberScheduled))
		}).WithContext(ctx).WithTimeout(wait).Should(Succeed())
		Expect(daemonSetPodUIDs(ctx)).NotTo(Equal(agentUID), "the agent pod was not replaced")
		waitComponents(ctx, slicerv1alpha1.ConditionAvailable, slicerv1alpha1.ConditionWebhookAvailable,
			slicerv1alpha1.ConditionSchedulerAvailable, slicerv1alpha1.ConditionAgentAvailable)
		GinkgoWriter.Printf("upgrade: operands rolled and Slicer Available %s after the catalog swap\n", time.Since(start).Round(time.Millisecond))

		By("the MIG pods, their allocations and their slices are as before")
		Consistently(func(g Gomega) {
			g.Expect(podsNow(ctx)).To(Equal(pods))
			g.Expect(allocationsNow(ctx, g)).To(Equal(allocations))
			g.Expect(migInstances()).To(Equal(instances))
		}).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())
		expectNoNewListener()
	})

	It("uninstalls through OLM, leaving nothing of Slicer but its CRDs", func(ctx SpecContext) {
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloads}})).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: workloads}, &corev1.Namespace{}))
		}).WithContext(ctx).WithTimeout(wait).Should(BeTrue())
		Expect(k8s.Delete(ctx, &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}})).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{}))
		}).WithContext(ctx).WithTimeout(wait).Should(BeTrue(), "the Slicer is not gone")
		Expect(k8s.Delete(ctx, obj(subscriptionGVK, namespace, pkgName, nil))).To(Succeed())
		Expect(k8s.Delete(ctx, obj(csvGVK, namespace, csvName(current), nil))).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(leftovers(ctx, g)).To(ConsistOf(knownLeftovers))
		}).WithContext(ctx).WithTimeout(wait).Should(Succeed())
		GinkgoWriter.Printf("uninstall: left besides the CRDs: %v\n", knownLeftovers)
		for _, crd := range []string{"slicers.slicer.dev", "nodeaccelerators.slicer.dev", "sliceallocations.slicer.dev"} {
			Expect(k8s.Get(ctx, client.ObjectKey{Name: crd}, newObj(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}))).
				To(Succeed(), "OLM v0 keeps the CRDs of an uninstalled operator")
		}
	})
})

// knownLeftovers is what an uninstall through OLM leaves of Slicer besides its CRDs
// (docs/olm-testing.md): the operator's and the scheduler's leader-election Leases (nothing
// deletes a Lease when its holder goes; deleting slicer-system does), and the bundle's
// slicer-metrics-reader ClusterRole, which OLM v0.46.0 creates with an olm.owner label but
// without the olm.owner.namespace and olm.owner.kind labels its CSV finalizer selects on
// (processFinalizer in pkg/controller/operators/olm/operator.go, ownerutil.CSVOwnerSelector in
// pkg/lib/ownerutil/util.go, module github.com/operator-framework/operator-lifecycle-manager),
// so it is never deleted.
var knownLeftovers = []string{
	"clusterrole slicer-metrics-reader",
	"lease " + namespace + "/slicer-operator.slicer.dev",
	"lease " + namespace + "/slicer-scheduler",
}

// v010Workaround grants Slicer v0.1.0's agent the sliceallocations verbs its release forgot.
func v010Workaround() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "olm-test-v010-agent-workaround"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"slicer.dev"}, Resources: []string{"sliceallocations"}, Verbs: []string{"patch", "update"}}}}
}

func v010WorkaroundBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "olm-test-v010-agent-workaround"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "olm-test-v010-agent-workaround"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: agentNamespace, Name: "slicer-agent"}}}
}

// diagnose prints what explains most failures: pods, OLM's objects, Slicer's status, the
// workload's events and allocations, the operands' logs.
func diagnose(ctx context.Context) {
	k := filepath.Join(repoRoot, "bin", "k8s", "kubectl")
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "csv,installplan,subscription", "-n", namespace},
		{"get", "slicer", "default", "-o", "yaml"},
		{"get", "sliceallocations", "-A", "-o", "yaml"},
		{"get", "events", "-n", workloads},
		{"describe", "pods", "-n", workloads},
		{"logs", "-n", namespace, "deploy/slicer-scheduler", "--tail=40"},
		{"logs", "-n", agentNamespace, "ds/slicer-agent", "--tail=40"},
		{"logs", "-n", namespace, "deploy/slicer-operator", "--tail=40"},
	} {
		out, err := exec.CommandContext(ctx, k, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		GinkgoWriter.Printf("--- kubectl %s (%v)\n%s\n", strings.Join(args, " "), err, out)
	}
}

// waitInstalled waits for the Subscription's InstallPlan for version to be Complete and its CSV
// Succeeded.
func waitInstalled(ctx context.Context, version string) {
	Eventually(func(g Gomega) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(installPlanGVK.GroupVersion().WithKind("InstallPlanList"))
		g.Expect(k8s.List(ctx, l, client.InNamespace(namespace))).To(Succeed())
		var phases []string
		for _, ip := range l.Items {
			names, _, _ := unstructured.NestedStringSlice(ip.Object, "spec", "clusterServiceVersionNames")
			if slices.Contains(names, csvName(version)) {
				p, _, _ := unstructured.NestedString(ip.Object, "status", "phase")
				phases = append(phases, p)
			}
		}
		g.Expect(phases).To(ContainElement("Complete"), "InstallPlan for %s", csvName(version))
	}).WithContext(ctx).WithTimeout(wait).Should(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(field(ctx, g, csvGVK, namespace, csvName(version), "status", "phase")).To(Equal("Succeeded"))
	}).WithContext(ctx).WithTimeout(wait).Should(Succeed())
}

// waitComponents waits for the Slicer's conditions to be True and the node's NodeAccelerator
// Ready.
func waitComponents(ctx context.Context, conditions ...string) {
	Eventually(func(g Gomega) {
		var s slicerv1alpha1.Slicer
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &s)).To(Succeed())
		for _, c := range conditions {
			g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, c)).To(BeTrue(), "Slicer condition %s: %v", c, s.Status.Conditions)
		}
		var na slicerv1alpha1.NodeAccelerator
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, &na)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(na.Status.Conditions, slicerv1alpha1.ConditionReady)).To(BeTrue(), "NodeAccelerator Ready")
	}).WithContext(ctx).WithTimeout(wait).Should(Succeed())
}

func podsNow(ctx context.Context) map[string]podState {
	out := map[string]podState{}
	for name := range slicePods {
		var p corev1.Pod
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: workloads, Name: name}, &p)).To(Succeed())
		Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", name)
		var restarts int32
		for _, c := range p.Status.ContainerStatuses {
			restarts += c.RestartCount
		}
		out[name] = podState{UID: p.UID, Restarts: restarts}
	}
	return out
}

func allocationsNow(ctx context.Context, g Gomega) map[string]allocationState {
	var l slicerv1alpha1.SliceAllocationList
	g.Expect(k8s.List(ctx, &l, client.InNamespace(workloads))).To(Succeed())
	out := map[string]allocationState{}
	for _, a := range l.Items {
		out[a.Name] = allocationState{UID: a.UID, Spec: a.Spec, MIGUUID: a.Status.MIGDeviceUUID, State: a.Status.State}
	}
	return out
}

// migInstances lists the emulated GPUs' MIG devices as the agent keeps them on the host (its
// state survives agent restarts and upgrades; a slice destroyed and recreated gets a new UUID).
func migInstances() []string {
	insts, err := emulated.ReadStateFile(emulatedStateFile)
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, si := range insts {
		for _, u := range si.MIGUUIDs {
			out = append(out, fmt.Sprintf("%s %s %d %s", si.GPUUUID, si.Profile, si.Placement, u))
		}
	}
	slices.Sort(out)
	return out
}

func daemonSetPodUIDs(ctx context.Context) []types.UID {
	var l corev1.PodList
	Expect(k8s.List(ctx, &l, client.InNamespace(agentNamespace))).To(Succeed())
	var out []types.UID
	for _, p := range l.Items {
		out = append(out, p.UID)
	}
	return out
}

// leftovers lists what is left of Slicer after the uninstall: its agent namespace, any
// Deployment, DaemonSet, Service, ServiceAccount (but default), Role, RoleBinding, Secret or
// ConfigMap (but the API server's) or Lease in slicer-system, any ClusterRole,
// ClusterRoleBinding, webhook configuration, ValidatingAdmissionPolicy or binding whose name has
// "slicer", any Slicer, and any CSV (OLM copies CSVs into every namespace). OLM's aggregated
// ClusterRoles of each CRD (<crd>-<version>-{admin,edit,view,crdview}, owned by the CRD) go
// with the CRDs and are not counted.
func leftovers(ctx context.Context, g Gomega) []string {
	var out []string
	if err := k8s.Get(ctx, client.ObjectKey{Name: agentNamespace}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		out = append(out, "namespace "+agentNamespace)
	}
	namespaced := map[string]client.ObjectList{
		"deployment": &appsv1.DeploymentList{}, "daemonset": &appsv1.DaemonSetList{}, "service": &corev1.ServiceList{},
		"serviceaccount": &corev1.ServiceAccountList{}, "role": newList("rbac.authorization.k8s.io", "v1", "Role"),
		"rolebinding": newList("rbac.authorization.k8s.io", "v1", "RoleBinding"), "secret": &corev1.SecretList{},
		"configmap": &corev1.ConfigMapList{}, "lease": newList("coordination.k8s.io", "v1", "Lease"),
	}
	for kind, l := range namespaced {
		g.Expect(k8s.List(ctx, l, client.InNamespace(namespace))).To(Succeed())
		for _, o := range items(l) {
			if (kind == "serviceaccount" && o == "default") || (kind == "configmap" && (o == "kube-root-ca.crt" || o == "openshift-service-ca.crt")) {
				continue
			}
			out = append(out, kind+" "+namespace+"/"+o)
		}
	}
	cluster := map[string]client.ObjectList{
		"clusterrole": newList("rbac.authorization.k8s.io", "v1", "ClusterRole"), "clusterrolebinding": newList("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
		"mutatingwebhookconfiguration":     newList("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration"),
		"validatingwebhookconfiguration":   newList("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
		"validatingadmissionpolicy":        newList("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"),
		"validatingadmissionpolicybinding": newList("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding"),
		"csv":                              newList(csvGVK.Group, csvGVK.Version, csvGVK.Kind),
		"slicer":                           newList("slicer.dev", "v1alpha1", "Slicer"),
	}
	for kind, l := range cluster {
		g.Expect(k8s.List(ctx, l)).To(Succeed())
		crdOwned := ownedByCRD(l)
		for _, o := range items(l) {
			if (kind == "csv" || kind == "slicer" || strings.Contains(o, "slicer")) && !crdOwned[o] {
				out = append(out, kind+" "+o)
			}
		}
	}
	slices.Sort(out)
	return out
}

// ownedByCRD is the names of the list's objects that a CustomResourceDefinition owns.
func ownedByCRD(l client.ObjectList) map[string]bool {
	out := map[string]bool{}
	Expect(meta.EachListItem(l, func(o runtime.Object) error {
		m := o.(client.Object)
		for _, r := range m.GetOwnerReferences() {
			if strings.EqualFold(r.Kind, "CustomResourceDefinition") && strings.HasPrefix(r.APIVersion, "apiextensions.k8s.io/") {
				out[m.GetName()] = true
			}
		}
		return nil
	})).To(Succeed())
	return out
}

func newList(group, version, kind string) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: version, Kind: kind + "List"})
	return l
}

func items(l client.ObjectList) []string {
	var out []string
	Expect(meta.EachListItem(l, func(o runtime.Object) error {
		m := o.(client.Object)
		name := m.GetName()
		if m.GetNamespace() != "" && m.GetNamespace() != namespace {
			name = m.GetNamespace() + "/" + name
		}
		out = append(out, name)
		return nil
	})).To(Succeed())
	return out
}

// expectNoNewListener fails when a TCP socket listens on a non-loopback address that did not
// before the node came up (the network rule of docs/listeners.md; OLM's :8080 is inside its
// own namespaces, so it does not count).
func expectNoNewListener() {
	var added []string
	for _, l := range nonLoopbackListeners() {
		if !slices.Contains(listenersBefore, l) {
			added = append(added, l)
		}
	}
	Expect(added).To(BeEmpty(), "new non-loopback listeners on the host")
}

func nonLoopbackListeners() []string {
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(f)
		Expect(err).NotTo(HaveOccurred())
		ls, err := procnet.ParseTCP(raw)
		Expect(err).NotTo(HaveOccurred())
		for _, l := range ls {
			if !l.Loopback() {
				out = append(out, l.Addr.String())
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func csvName(version string) string { return pkgName + ".v" + version }

// image is the image a bundle's CSV names for a component (quay.io/slicer-operator/...:vVERSION;
// the scheduler's tag has a -k8s-1.N suffix from v0.2.0 on, hence HavePrefix where it is checked).
func image(component, version string) string {
	return "quay.io/slicer-operator/slicer-" + component + ":v" + version
}

// pinnedImages is the digest references of the current bundle's images of a component
// (repository@sha256:...; the scheduler has one per minor), as hack/bundle -digests pins them.
func pinnedImages(component string) []string {
	repo := "quay.io/slicer-operator/slicer-" + component
	var out []string
	for ref, digest := range pinned {
		if strings.HasPrefix(ref, repo+":") {
			out = append(out, repo+"@"+digest)
		}
	}
	Expect(out).NotTo(BeEmpty(), "no pinned image of %s", component)
	return out
}

func deploymentImage(ctx context.Context, ns, name string) string {
	var d appsv1.Deployment
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d)).To(Succeed())
	return d.Spec.Template.Spec.Containers[0].Image
}

func obj(gvk schema.GroupVersionKind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := newObj(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func newObj(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

func create(ctx context.Context, u *unstructured.Unstructured) {
	Expect(k8s.Create(ctx, u)).To(Succeed(), "create %s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
}

// field reads a string field of an object; "" when the object or the field is absent.
func field(ctx context.Context, g Gomega, gvk schema.GroupVersionKind, ns, name string, path ...string) string {
	u := newObj(gvk)
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "get %s %s/%s: %v", gvk.Kind, ns, name, err)
		return ""
	}
	v, _, _ := unstructured.NestedString(u.Object, path...)
	return v
}
