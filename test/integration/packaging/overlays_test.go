package packaging_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	oprender "github.com/slicer-operator/slicer/operator/render"
)

// overlay is what each kustomization must contain beyond passing a dry run.
type overlay struct {
	dir string
	// podSecurity is the enforce level of the operator namespace.
	podSecurity string
	check       func(objs []*unstructured.Unstructured)
}

var _ = Describe("kustomize overlays", Ordered, func() {
	DescribeTable("render and pass a server-side dry run",
		func(o overlay) {
			objs := render(o.dir)
			kinds := map[string]int{}
			for _, u := range objs {
				kinds[u.GetKind()]++
			}
			Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", 3))
			for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service", "Slicer"} {
				Expect(kinds).To(HaveKey(k), "config/%s renders no %s", o.dir, k)
			}
			Expect(kinds).NotTo(HaveKey("NetworkPolicy"))

			// Namespaces and ServiceAccounts exist for real so that the
			// namespaced objects and the operator pod can be dry-run.
			for _, u := range objs {
				if u.GetKind() == "Namespace" {
					Expect(u.GetLabels()).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", o.podSecurity))
					apply(u)
				}
			}
			for _, u := range objs {
				if u.GetKind() == "ServiceAccount" {
					apply(u)
				}
			}
			for _, u := range objs {
				Expect(dryRunApply(u)).To(Succeed(), "dry run of %s from config/%s", id(u), o.dir)
				if u.GetKind() == "Slicer" {
					Expect(u.GetNamespace()).To(BeEmpty(), "the Slicer is cluster-scoped")
				}
			}

			// The operator pod is admitted by Pod Security in its namespace.
			for _, u := range objs {
				if u.GetKind() != "Deployment" {
					continue
				}
				d := toDeployment(u)
				for _, c := range d.Spec.Template.Spec.Containers {
					Expect(c.Resources.Requests).To(HaveKey(corev1.ResourceCPU), c.Name)
					Expect(c.Resources.Requests).To(HaveKey(corev1.ResourceMemory), c.Name)
				}
				pod := podOf(d.Spec.Template, d.Namespace, d.Name+"-probe")
				Expect(k8s.Create(ctx, pod, client.DryRunAll)).To(Succeed(), "operator pod of config/%s in a %s namespace", o.dir, o.podSecurity)
			}
			if o.check != nil {
				o.check(objs)
			}
		},
		Entry("config/default", overlay{dir: "default", podSecurity: "restricted", check: checkRestrictedOperator}),
		Entry("config/overlays/openshift", overlay{dir: "overlays/openshift", podSecurity: "restricted", check: checkOpenShift}),
		Entry("config/overlays/emulated", overlay{dir: "overlays/emulated", podSecurity: "privileged", check: checkEmulated}),
		Entry("config/overlays/emulated-dra", overlay{dir: "overlays/emulated-dra", podSecurity: "privileged", check: checkEmulatedDRA}),
		Entry("config/overlays/hardened", overlay{dir: "overlays/hardened", podSecurity: "restricted", check: checkHardened}),
	)

	It("enforces Pod Security, so the admission check above can fail", func() {
		// The emulated operator pod uses the host network: a namespace at
		// restricted must reject it.
		apply(namespace("packaging-restricted", "restricted"))
		apply(serviceAccount("packaging-restricted", "slicer-operator"))
		for _, u := range render("overlays/emulated") {
			if u.GetKind() != "Deployment" {
				continue
			}
			d := toDeployment(u)
			pod := podOf(d.Spec.Template, "packaging-restricted", "hostnet")
			err := k8s.Create(ctx, pod, client.DryRunAll)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden by Pod Security, got %v", err)
			Expect(err.Error()).To(ContainSubstring("host namespaces"))
		}
	})
})

// checkRestrictedOperator: PSS restricted without a fixed UID (OpenShift's
// restricted-v2 assigns one).
func checkRestrictedOperator(objs []*unstructured.Unstructured) {
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		spec := toDeployment(u).Spec.Template.Spec
		Expect(spec.SecurityContext.RunAsUser).To(BeNil())
		Expect(spec.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
		Expect(spec.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
		for _, c := range spec.Containers {
			sc := c.SecurityContext
			Expect(sc.RunAsUser).To(BeNil())
			Expect(sc.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()))
			Expect(sc.AllowPrivilegeEscalation).To(HaveValue(BeFalse()))
			Expect(sc.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
		}
	}
}

// checkHardened: config/default with the operator required off the GPU nodes, the Slicer
// asking the same of the scheduler and the webhook and the agent namespace's quota, and the
// operator namespace's quota (priority_test.go runs it against a guarded apiserver).
func checkHardened(objs []*unstructured.Unstructured) {
	checkRestrictedOperator(objs)
	quotas := 0
	for _, u := range objs {
		switch u.GetKind() {
		case "Deployment":
			a := toDeployment(u).Spec.Template.Spec.Affinity.NodeAffinity
			Expect(a.PreferredDuringSchedulingIgnoredDuringExecution).To(BeEmpty())
			Expect(a.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal([]corev1.NodeSelectorTerm{oprender.AvoidGPUNodesTerm()}))
		case "Slicer":
			v, _, _ := unstructured.NestedString(u.Object, "spec", "controlPlane", "avoidGPUNodes")
			Expect(v).To(Equal("Required"))
			v, _, _ = unstructured.NestedString(u.Object, "spec", "priority", "criticalPriorityQuota")
			Expect(v).To(Equal("Enabled"))
		case "ResourceQuota":
			quotas++
			Expect(u.GetNamespace()).To(Equal("slicer-system"))
		}
	}
	Expect(quotas).To(Equal(1))
}

func checkOpenShift(objs []*unstructured.Unstructured) {
	checkRestrictedOperator(objs)
	for _, u := range objs {
		switch u.GetKind() {
		case "Namespace":
			Expect(u.GetLabels()).To(HaveKeyWithValue("openshift.io/cluster-monitoring", "true"))
		case "Slicer":
			v, _, _ := unstructured.NestedString(u.Object, "spec", "webhook", "certificateProvider")
			Expect(v).To(Equal("OpenShiftServiceCA"))
		}
	}
}

func checkEmulated(objs []*unstructured.Unstructured) {
	checkLoopbackEmulated(objs, "", []any{
		map[string]any{"model": "H100-80GB", "count": float64(2)},
		map[string]any{"model": "A100-40GB", "count": float64(2)},
	})
}

// checkEmulatedDRA: the emulated overlay with the DRA frontend on one GPU model, so the
// node's slicer.dev/gpu-model label names every GPU and each profile gets a DeviceClass.
func checkEmulatedDRA(objs []*unstructured.Unstructured) {
	checkLoopbackEmulated(objs, "DRA", []any{map[string]any{"model": "H100-80GB", "count": float64(2)}})
}

// checkLoopbackEmulated: config/overlays/emulated's loopback node, with the Slicer's
// frontend ("" when unset) and emulated GPUs.
func checkLoopbackEmulated(objs []*unstructured.Unstructured, frontend string, wantGPUs []any) {
	for _, u := range objs {
		switch u.GetKind() {
		case "Slicer":
			spec := u.Object["spec"].(map[string]any)
			f, _, _ := unstructured.NestedString(u.Object, "spec", "frontend")
			Expect(f).To(Equal(frontend))
			Expect(spec).To(HaveKeyWithValue("driver", HaveKeyWithValue("mode", "Emulated")))
			// the local node runs NFD (hack/local-cluster): the rule is applied as on a real cluster
			Expect(spec).To(HaveKeyWithValue("nodeSelection", HaveKeyWithValue("nodeFeatureRule", "Enabled")))
			Expect(spec).To(HaveKeyWithValue("network", SatisfyAll(
				HaveKeyWithValue("endpointMode", "HostNetwork"),
				HaveKeyWithValue("listenAddress", "127.0.0.1"))))
			gpus, _, _ := unstructured.NestedSlice(u.Object, "spec", "agent", "emulatedGPUs")
			Expect(gpus).To(Equal(wantGPUs))
		case "Deployment":
			d := toDeployment(u)
			Expect(d.Spec.Template.Spec.HostNetwork).To(BeTrue())
			c := d.Spec.Template.Spec.Containers[0]
			Expect(c.Image).To(Equal("localhost/slicer-operator:dev"))
			Expect(c.ImagePullPolicy).To(Equal(corev1.PullNever))
			// the operator's own listeners on loopback too
			for _, flag := range []string{"--metrics-bind-address=", "--health-probe-bind-address=", "--host-network-address="} {
				Expect(c.Args).To(ContainElement(MatchRegexp(`^`+flag+`127\.0\.0\.1(:[0-9]+)?$`)), "operator argument %s", flag)
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			Expect(env).To(HaveKeyWithValue("KUBERNETES_SERVICE_HOST", "127.0.0.1"))
			Expect(env).To(HaveKeyWithValue("KUBERNETES_SERVICE_PORT", "16443"))
			for _, comp := range []string{"WEBHOOK", "AGENT"} {
				Expect(env).To(HaveKeyWithValue("RELATED_IMAGE_"+comp, MatchRegexp(`^localhost/slicer-[a-z]+:dev$`)))
			}
			// images/local.sh names a scheduler image per minor so.
			Expect(env).NotTo(HaveKey("RELATED_IMAGE_SCHEDULER"))
			for _, minor := range kubeMinors() {
				Expect(env).To(HaveKeyWithValue(schedulerImageEnv(minor), "localhost/slicer-scheduler:dev-k8s-"+minor))
			}
		}
	}
}

func namespace(name, level string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Namespace")
	u.SetName(name)
	u.SetLabels(map[string]string{"pod-security.kubernetes.io/enforce": level})
	return u
}

func serviceAccount(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ServiceAccount")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}
