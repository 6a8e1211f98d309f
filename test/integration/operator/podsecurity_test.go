package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/kubeversion"
	"github.com/slicer-operator/slicer/operator/render"
)

func renderOptions(ns string, mutate ...func(*slicerv1alpha1.Slicer)) render.Options {
	s := newSlicer(mutate...)
	s.Spec.Scheduler.Replicas, s.Spec.Webhook.Replicas = 2, 2
	return render.Options{
		Slicer: s, Namespace: ns, AgentNamespace: ns,
		Images: render.Images{Schedulers: testSchedulerImages(), Webhook: "reg.test/w:v1", Agent: "reg.test/a:v1", Driver: "reg.test/d"},
		Ports:  render.DefaultPorts(), Cert: render.CertSelfManaged,
		Kubernetes: kubeversion.Version{Minor: kubeversion.Supported[len(kubeversion.Supported)-1], GitVersion: "v1.37.2"},
	}
}

func podsOf(objs []client.Object) []*corev1.Pod {
	var pods []*corev1.Pod
	for _, o := range objs {
		var t *corev1.PodTemplateSpec
		switch x := o.(type) {
		case *appsv1.Deployment:
			t = &x.Spec.Template
		case *appsv1.DaemonSet:
			t = &x.Spec.Template
		default:
			continue
		}
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Labels: t.Labels}, Spec: *t.Spec.DeepCopy()})
	}
	return pods
}

// O12: every rendered pod template, server-side dry-run into namespaces
// enforcing each Pod Security level.
var _ = Describe("Pod Security of rendered pod templates (O12)", Ordered, func() {
	levels := []string{"restricted", "baseline", "privileged"}
	BeforeAll(func() {
		for _, l := range levels {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pss-" + l, Labels: map[string]string{"pod-security.kubernetes.io/enforce": l}}}
			Expect(client.IgnoreAlreadyExists(admin.Create(ctx, ns))).To(Succeed())
		}
	})

	admits := func(pod *corev1.Pod, level string) error {
		p := pod.DeepCopy()
		p.Namespace = "pss-" + level
		p.Spec.ServiceAccountName = ""
		return admin.Create(ctx, p, client.DryRunAll)
	}

	DescribeTable("scheduler and webhook pass restricted",
		func(render func(render.Options) ([]client.Object, error)) {
			for _, l := range levels {
				objs, err := render(renderOptions("pss-" + l))
				Expect(err).NotTo(HaveOccurred())
				pods := podsOf(objs)
				Expect(pods).To(HaveLen(1))
				Expect(admits(pods[0], l)).To(Succeed(), "level %s", l)
			}
		},
		Entry("scheduler", render.Scheduler),
		Entry("webhook", render.Webhook),
	)

	DescribeTable("the agent needs privileged",
		func(mutate func(*slicerv1alpha1.Slicer)) {
			objs, err := render.Agent(renderOptions("pss-privileged", mutate))
			Expect(err).NotTo(HaveOccurred())
			pods := podsOf(objs)
			Expect(pods).To(HaveLen(1))
			Expect(admits(pods[0], "privileged")).To(Succeed())
			for _, l := range []string{"restricted", "baseline"} {
				err := admits(pods[0], l)
				Expect(apierrors.IsForbidden(err)).To(BeTrue(), "level %s: %v", l, err)
				Expect(err.Error()).To(ContainSubstring("violates PodSecurity"))
				GinkgoWriter.Printf("agent in %s: %v\n", l, err)
			}
		},
		Entry("KMM driver", func(*slicerv1alpha1.Slicer) {}),
		Entry("emulated GPUs", func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated
			s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 2}}
		}),
	)

	It("labels the agent namespace privileged and nothing else", func() {
		ns := render.AgentNamespace(renderOptions("x"))
		Expect(ns.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "privileged"))
	})
})

// O11 and b.3 #27: the operator's ServiceAccount holds no more than it needs.
var _ = Describe("Operator RBAC (O11)", func() {
	DescribeTable("denies",
		func(attrs authorizationv1.ResourceAttributes) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:" + operatorNamespace + ":slicer-operator",
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespace},
				ResourceAttributes: &attrs,
			}}
			Expect(admin.Create(ctx, sar)).To(Succeed())
			Expect(sar.Status.Allowed).To(BeFalse(), "%+v allowed", attrs)
		},
		Entry("creating CRDs", authorizationv1.ResourceAttributes{Verb: "create", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}),
		Entry("reading Secrets of other namespaces", authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "kube-system"}),
		Entry("escalating roles", authorizationv1.ResourceAttributes{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}),
		Entry("binding arbitrary roles", authorizationv1.ResourceAttributes{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "cluster-admin"}),
		Entry("impersonating", authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users"}),
		Entry("using any SCC but privileged", authorizationv1.ResourceAttributes{Verb: "use", Group: "security.openshift.io", Resource: "securitycontextconstraints", Name: "anyuid"}),
		Entry("exec into pods", authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "default"}),
	)
})
