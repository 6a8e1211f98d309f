package ha_test

import (
	"sort"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/manager"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

// operandKinds are the kinds the operator writes (operator/render); the
// end state compared between runs is every object of these kinds that
// carries the operator's managed-by label.
var operandKinds = []schema.GroupVersionKind{
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Version: "v1", Kind: "Secret"},
	{Version: "v1", Kind: "Namespace"},
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"},
	{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Kind: "NodeFeatureRule"},
	{Group: "kmm.sigs.x-k8s.io", Version: "v1beta1", Kind: "Module"},
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"},
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"},
}

var _ = Describe("Two operator replicas", func() {
	It("the standby finishes a rollout whose leader was killed: same Slicer status and operands as one replica (O2, I5)", func() {
		bin := build("./operator/cmd/slicer-operator")
		start := func(e *framework.Env, name string) *replica {
			return startReplicaOn(e, leaseNamespace+"/"+framework.OperatorServiceAccount, name, bin, func(kubeconfig string) []string {
				return []string{"--namespace=" + leaseNamespace,
					"--metrics-bind-address=0", "--health-probe-bind-address=0", "--leader-elect=true",
					// Short timings: the standby takes over within seconds of the kill.
					"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=500ms"}
			})
		}

		// Each run has a control plane of its own: the operator installs
		// admission objects that would also judge the other tests' pods.
		controlPlane := func() *framework.Env {
			e, err := framework.Start(framework.Options{})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(e.Stop)
			Expect(e.Client.Create(ctx, framework.MakeNamespace(leaseNamespace))).To(Succeed())
			Expect(framework.InstallOperatorRBAC(ctx, e.Client, leaseNamespace)).To(Succeed())
			return e
		}

		By("one replica: the reference end state")
		ref := controlPlane()
		single := start(ref, "operator-single")
		Expect(ref.Client.Create(ctx, &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}})).To(Succeed())
		t0 := time.Now()
		waitAvailable(ref.Client)
		GinkgoWriter.Printf("one replica: Available %s after the Slicer was created\n", since(t0))
		want := endState(ref.Client)
		Expect(len(want)).To(BeNumerically(">", 20), "the reference install has its operands")
		single.kill()

		By("two replicas; the leader is killed while it waits for the webhook to roll out")
		two := controlPlane()
		c := two.Client
		a := start(two, "operator-a")
		Eventually(func() string { return holderOn(c, leaseNamespace, manager.LeaderElectionID) }).ShouldNot(BeEmpty())
		leader := holderOn(c, leaseNamespace, manager.LeaderElectionID)
		b := start(two, "operator-b")
		Eventually(func() []string { return b.lines(`(?i)attempting to acquire leader lease`) }).ShouldNot(BeEmpty())
		Expect(c.Create(ctx, &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}})).To(Succeed())
		// The webhook Deployment is written; nothing plays kube-controller-manager
		// yet, so the leader waits for it before the scheduler (components.go order).
		Eventually(func() int { return a.proxy.Writes()["PATCH deployments"] }).Should(BeNumerically(">=", 1))
		Expect(a.running()).To(BeTrue(), "the leader died before it was killed: %s", a.exitStatus())
		standby := b.proxy.Writes()
		a.kill()
		killed := time.Now()
		err := c.Get(ctx, client.ObjectKey{Namespace: leaseNamespace, Name: render.SchedulerName}, &appsv1.Deployment{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the rollout was not finished when the leader died (scheduler Deployment: %v)", err)
		s := &slicerv1alpha1.Slicer{}
		Expect(c.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, s)).To(Succeed())
		Expect(meta.IsStatusConditionTrue(s.Status.Conditions, slicerv1alpha1.ConditionAvailable)).To(BeFalse())
		GinkgoWriter.Printf("leader %s SIGKILLed after %d writes: %v\n", leader, total(a.proxy.Writes()), a.proxy.Writes())
		delete(standby, "PUT leases")
		delete(standby, "POST leases")
		Expect(standby).To(BeEmpty(), "the standby wrote while another replica led")

		Eventually(func() string { return holderOn(c, leaseNamespace, manager.LeaderElectionID) }).ShouldNot(Or(BeEmpty(), Equal(leader)))
		GinkgoWriter.Printf("Lease taken over %s after the kill\n", since(killed))
		waitAvailable(c)
		GinkgoWriter.Printf("Available %s after the kill; new leader's writes: %v\n", since(killed), b.proxy.Writes())
		for _, l := range b.lines(`(?i)leader lease|acquired lease`) {
			GinkgoWriter.Println("operator-b: " + l)
		}
		Eventually(func() string { return diffStates(want, endState(c)) }).Should(BeEmpty(), "end state of the run with a killed leader (-one replica +two)")
		Expect(b.running()).To(BeTrue(), "new leader: %s", b.exitStatus())
	})
})

// waitAvailable plays kube-controller-manager (envtest runs none) until the
// Slicer is Available for its current generation.
func waitAvailable(c client.Client) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		_, err := framework.MarkWorkloadsAvailable(ctx, c, leaseNamespace, leaseNamespace+"-agent")
		g.Expect(err).NotTo(HaveOccurred())
		s := &slicerv1alpha1.Slicer{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, s)).To(Succeed())
		cond := meta.FindStatusCondition(s.Status.Conditions, slicerv1alpha1.ConditionAvailable)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), "%s: %s", cond.Reason, cond.Message)
		g.Expect(cond.ObservedGeneration).To(Equal(s.Generation))
	}).Should(Succeed())
}

// endState is the Slicer's status and every operand, keyed "Kind ns/name",
// as YAML without what differs between two control planes for the same
// outcome: identities and timestamps (uid, resourceVersion,
// creationTimestamp, managedFields, owner UIDs and the applied hash over
// them, condition times), generated
// key material (Secret data, caBundle, the metrics CA ConfigMaps) and what kube-controller-manager's
// stand-in wrote (workload status).
func endState(c client.Client) map[string]string {
	GinkgoHelper()
	out := map[string]string{}
	s := &unstructured.Unstructured{}
	s.SetGroupVersionKind(slicerv1alpha1.GroupVersion.WithKind("Slicer"))
	Expect(c.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, s)).To(Succeed())
	status, _, _ := unstructured.NestedMap(s.Object, "status")
	conds, _, _ := unstructured.NestedSlice(status, "conditions")
	for _, cond := range conds {
		delete(cond.(map[string]any), "lastTransitionTime")
	}
	if conds != nil {
		status["conditions"] = conds
	}
	out["Slicer status"] = toYAML(status)
	for _, gvk := range operandKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		Expect(c.List(ctx, list, client.MatchingLabels{render.ManagedByLabel: render.ManagedByValue})).To(Succeed())
		for _, u := range list.Items {
			for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"} {
				unstructured.RemoveNestedField(u.Object, "metadata", f)
			}
			// The applied hash covers the owner reference, whose UID differs.
			unstructured.RemoveNestedField(u.Object, "metadata", "annotations", controller.AppliedHashAnnotation)
			owners := u.GetOwnerReferences()
			for i := range owners {
				owners[i].UID = ""
			}
			u.SetOwnerReferences(owners)
			switch gvk.Kind {
			case "Deployment", "DaemonSet", "Namespace":
				unstructured.RemoveNestedField(u.Object, "status")
			case "Service": // allocated by the apiserver
				unstructured.RemoveNestedField(u.Object, "spec", "clusterIP")
				unstructured.RemoveNestedField(u.Object, "spec", "clusterIPs")
			case "Secret":
				keys := []string{}
				data, _, _ := unstructured.NestedMap(u.Object, "data")
				for k := range data {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				u.Object["data"] = keys
			case "ConfigMap": // a metrics CA bundle is generated key material too
				if _, ok, _ := unstructured.NestedString(u.Object, "data", render.MetricsCAKey); ok {
					Expect(unstructured.SetNestedField(u.Object, "(generated CA bundle)", "data", render.MetricsCAKey)).To(Succeed())
				}
			case "MutatingWebhookConfiguration":
				hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
				for _, h := range hooks {
					unstructured.RemoveNestedField(h.(map[string]any), "clientConfig", "caBundle")
				}
				Expect(unstructured.SetNestedSlice(u.Object, hooks, "webhooks")).To(Succeed())
			}
			key := gvk.Kind + " " + u.GetNamespace() + "/" + u.GetName()
			Expect(out).NotTo(HaveKey(key))
			out[key] = toYAML(u.Object)
		}
	}
	return out
}

// diffStates lists every object that differs between two end states.
func diffStates(want, got map[string]string) string {
	var out []string
	for _, k := range sortedKeys(want) {
		if d := cmp.Diff(want[k], got[k]); d != "" {
			out = append(out, k+":\n"+d)
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			out = append(out, k+": only with two replicas")
		}
	}
	return strings.Join(out, "\n")
}

func toYAML(v any) string {
	GinkgoHelper()
	b, err := yaml.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func total(writes map[string]int) int {
	n := 0
	for _, v := range writes {
		n += v
	}
	return n
}
