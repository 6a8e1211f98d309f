package packaging_test

import (
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	oprender "github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

// The guard of docs/install.md ("Critical priority classes"): a kube-apiserver started with
// config/components/critical-priority's admission configuration admits pods at the critical
// classes only where a quota covers them. config/overlays/hardened installs the operator
// namespace's quota and the operator renders the agent namespace's (render.CriticalPriorityQuotas),
// so Slicer's pods are admitted there, and a tenant's pod at system-node-critical is refused
// in its namespace (issue 39, "Priority").
var _ = Describe("the critical priority guard", Ordered, func() {
	var guarded client.Client

	BeforeAll(func() {
		admission := filepath.Join(framework.RepoRoot(), "config", "components", "critical-priority", "apiserver", "admission-configuration.yaml")
		genv, err := framework.Start(framework.Options{WithoutExternalCRDs: true, APIServerArgs: map[string]string{"admission-control-config-file": admission}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(genv.Stop)
		guarded = genv.Client
	})

	// admitted server-side dry-runs pod (the quota's usage is checked on a dry run too).
	create := func(pod *corev1.Pod) error {
		return guarded.Create(ctx, pod.DeepCopy(), client.DryRunAll)
	}
	// quotaReady plays kube-controller-manager's quota controller (envtest runs none): the
	// admission plugin refuses a pod a quota covers while the quota's status is unknown.
	quotaReady := func(q *corev1.ResourceQuota) {
		GinkgoHelper()
		live := &corev1.ResourceQuota{}
		Expect(guarded.Get(ctx, client.ObjectKeyFromObject(q), live)).To(Succeed())
		live.Status = corev1.ResourceQuotaStatus{Hard: live.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
		Expect(guarded.Status().Update(ctx, live)).To(Succeed())
	}
	// pod is a pod at class that Pod Security restricted admits.
	pod := func(namespace, class string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: strings.TrimSuffix("at-"+class, "-")},
			Spec: corev1.PodSpec{
				PriorityClassName: class,
				SecurityContext:   &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{Name: "c", Image: "reg.test/c:v1", SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				}}},
			},
		}
	}

	It("admits Slicer's pods in the namespaces with a quota and refuses a tenant's at system-node-critical", func() {
		// The hardened install's objects: its namespace and the operator namespace's quota.
		var installQuota *corev1.ResourceQuota
		var operatorPod *corev1.Pod
		objs := render("overlays/hardened")
		for _, u := range objs {
			if u.GetKind() == "Namespace" {
				Expect(guarded.Create(ctx, unstructuredObj(u))).To(Succeed())
			}
		}
		for _, u := range objs {
			switch u.GetKind() {
			case "ServiceAccount":
				Expect(guarded.Create(ctx, unstructuredObj(u))).To(Succeed())
			case "Deployment":
				d := toDeployment(u)
				operatorPod = podOf(d.Spec.Template, d.Namespace, d.Name+"-probe")
			case "ResourceQuota":
				installQuota = &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName()}}
				Expect(guarded.Create(ctx, unstructuredObj(u))).To(Succeed())
			}
		}
		Expect(installQuota).NotTo(BeNil(), "config/overlays/hardened installs no ResourceQuota")
		quotaReady(installQuota)
		// The operator's rendering for the agent namespace.
		s := &slicerv1alpha1.Slicer{}
		s.Spec.Priority.CriticalPriorityQuota = slicerv1alpha1.FeatureEnabled
		for _, obj := range oprender.CriticalPriorityQuotas(oprender.Options{Slicer: s, Namespace: "slicer-system", AgentNamespace: "slicer-system-agent"}) {
			Expect(guarded.Create(ctx, obj)).To(Succeed())
			if q, ok := obj.(*corev1.ResourceQuota); ok {
				quotaReady(q)
			}
		}
		Expect(guarded.Create(ctx, framework.MakeNamespace("team-a"))).To(Succeed())

		Expect(operatorPod).NotTo(BeNil(), "config/overlays/hardened installs no operator")
		Expect(operatorPod.Spec.PriorityClassName).To(Equal(oprender.PriorityClass))
		Expect(create(operatorPod)).To(Succeed(), "the operator's pod in its namespace")
		Expect(create(pod("slicer-system-agent", oprender.PriorityClass))).To(Succeed(), "a pod at %s in the agent's namespace", oprender.PriorityClass)
		for _, class := range oprender.CriticalPriorityClasses {
			err := create(pod("team-a", class))
			Expect(err).To(HaveOccurred(), "a tenant's pod at %s admitted", class)
			Expect(err.Error()).To(ContainSubstring("insufficient quota to match these scopes"))
		}
		// A pod at no critical class is admitted everywhere (kube-system's quota is the admin's
		// to write: docs/install.md).
		Expect(create(pod("team-a", ""))).To(Succeed())
	})
})

func unstructuredObj(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	c.SetResourceVersion("")
	return c
}
