package webhook_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// reservedOnUpdate is the policy's answer to an update that writes a slicer.dev/ key
// (webhook/config/vap.go, reservedKeysOnUpdate).
const reservedOnUpdate = "the update adds or changes a label or annotation under slicer.dev/ on a pod that asks for MIG slices"

// A tenant may not put on a MIG pod later what it may not create it with (issue 39,
// "Reserved keys"). The tenant is a user bound to the edit role in its namespace, as a
// namespace editor is; the pods are written the way Slicer schedules them, so the policy
// alone decides, webhook running or not.
var _ = Describe("slicer.dev/ keys on a pod's update", Ordered, func() {
	const tenant = "tenant-editor"
	var asTenant client.Client

	BeforeAll(func() {
		cfg, err := framework.BindTenant(ctx, k8s, env.Config, userNS, tenant, "edit")
		Expect(err).NotTo(HaveOccurred())
		asTenant, err = client.New(cfg, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		// The apiserver enforces the policy BeforeSuite created a moment after: wait until it
		// refuses a forged pod at creation (the same policy holds the UPDATE rule), in
		// kube-system, which the webhook skips.
		Eventually(func() error {
			p := makePod("kube-system").Scheduler(scheduler).Label(slicerv1alpha1.LabelNode, "n1").Container("app", builder.Limits(sl1g, "1")).Obj()
			err := k8s.Create(ctx, p)
			if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'slicer-mig-pods'") {
				return fmt.Errorf("forged pod %s: the policy is not enforced yet: %w", p.Name, err)
			}
			return nil
		}).Should(Succeed())
	})

	// tenantPod is a MIG pod the tenant created, bound to a node as the scheduler binds it
	// (pods/binding): the rules of a pod's creation (no spec.nodeName) must not hold on update.
	tenantPod := func() *corev1.Pod {
		GinkgoHelper()
		p := makePod(userNS).Scheduler(scheduler).Container("app", builder.Limits(sl1g, "1")).Obj()
		// The binding reaches the apiserver's RBAC cache a moment later.
		Eventually(func() error { return asTenant.Create(ctx, p.DeepCopy()) }).Should(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		Expect(k8s.SubResource("binding").Create(ctx, p, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "gpu-node-1"},
		})).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		Expect(p.Spec.NodeName).To(Equal("gpu-node-1"))
		return p
	}
	patch := func(c client.Client, p *corev1.Pod, edit func(*corev1.Pod)) error {
		GinkgoHelper()
		latest := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), latest)).To(Succeed())
		base := latest.DeepCopy()
		edit(latest)
		return c.Patch(ctx, latest, client.MergeFrom(base))
	}
	setLabel := func(k, v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			if p.Labels == nil {
				p.Labels = map[string]string{}
			}
			p.Labels[k] = v
		}
	}
	setAnnotation := func(k, v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[k] = v
		}
	}
	refused := func(err error) {
		GinkgoHelper()
		Expect(err).To(HaveOccurred(), "admitted; want refused by the policy")
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "want the policy's refusal: %v", err)
		Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy 'slicer-mig-pods'"))
		Expect(err.Error()).To(ContainSubstring(reservedOnUpdate))
	}

	It("refuses a slicer.dev/ label or annotation a tenant adds to its bound MIG pod", func() {
		p := tenantPod()
		refused(patch(asTenant, p, setLabel(slicerv1alpha1.LabelNode, "gpu-node-2")))
		refused(patch(asTenant, p, setLabel(slicerv1alpha1.LabelComponent, "agent")))
		refused(patch(asTenant, p, setAnnotation("slicer.dev/gpu-uuid", "GPU-0")))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		for k := range p.Labels {
			Expect(k).NotTo(HavePrefix(slicerv1alpha1.DomainPrefix))
		}
		for k := range p.Annotations {
			Expect(k).NotTo(HavePrefix(slicerv1alpha1.DomainPrefix))
		}
	})

	It("refuses it from a cluster administrator too, as at creation", func() {
		refused(patch(k8s, tenantPod(), setAnnotation("slicer.dev/placement", "0+8")))
	})

	It("admits the tenant's own keys and slicer.dev/movable on a bound MIG pod", func() {
		p := tenantPod()
		Expect(patch(asTenant, p, setLabel("team", "a"))).To(Succeed())
		Expect(patch(asTenant, p, setAnnotation(slicerv1alpha1.AnnotationMovable, "false"))).To(Succeed())
		Expect(patch(asTenant, p, setAnnotation(slicerv1alpha1.AnnotationMovable, "true"))).To(Succeed())
	})

	It("leaves pods that ask for no MIG slice alone, as at creation", func() {
		p := makePod(userNS).Container("app", builder.Limits("cpu", "1")).Obj()
		Expect(asTenant.Create(ctx, p)).To(Succeed())
		Expect(patch(asTenant, p, setLabel(slicerv1alpha1.LabelComponent, "mine"))).To(Succeed())
	})
})
