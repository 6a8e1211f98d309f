package operator_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

// O2: the operator dies right after its k-th write, for every k up to the
// number of writes of a whole rollout; a restarted operator converges to the
// full install with no duplicate objects.
var _ = Describe("Operator killed mid-rollout (O2, I5)", Ordered, func() {
	AfterEach(cleanSlate)

	var total int
	It("measures the writes of a full rollout", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		Eventually(func(g Gomega) { expectInstalled(g, fullInstall(ns)) }).Should(Succeed())
		op.stop()
		total, _ = op.writes.count()
		AddReportEntry("writes of a full rollout", total)
		Expect(total).To(BeNumerically(">", 20))
	})

	It("converges after a kill at every write", func() {
		for k := 1; k <= total; k++ {
			By("killing after write " + itoa(k))
			ns := nextAgentNamespace()
			op := startOperator(operatorOptions{agentNamespace: ns, killAt: k})
			Expect(admin.Create(ctx, newSlicer())).To(Succeed())
			// Status writes depend on timing, so a run may converge in fewer
			// than k writes; then there is no kill point k in it.
			Eventually(func(g Gomega) {
				_, err := framework.MarkWorkloadsAvailable(ctx, admin, operatorNamespace, ns)
				g.Expect(err).NotTo(HaveOccurred())
				if n, _ := op.writes.count(); n >= k {
					return
				}
				c := condition(getSlicer(g), slicerv1alpha1.ConditionAvailable)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			}, time.Minute).Should(Succeed())
			op.stop()

			restarted := startOperator(operatorOptions{agentNamespace: ns})
			waitAvailable(ns)
			Eventually(func(g Gomega) { expectInstalled(g, fullInstall(ns)) }).Should(Succeed())
			restarted.stop()
			expectNoDuplicates()
			cleanSlate()
		}
	})
})

// expectNoDuplicates checks there is exactly one managed object of each
// singleton kind (names are deterministic, so a restart cannot fork them).
func expectNoDuplicates() {
	sel := client.MatchingLabels{render.ManagedByLabel: render.ManagedByValue}
	var deps appsv1.DeploymentList
	Expect(admin.List(ctx, &deps, client.InNamespace(operatorNamespace), sel)).To(Succeed())
	Expect(deps.Items).To(HaveLen(2))
	var mwcs admissionregistrationv1.MutatingWebhookConfigurationList
	Expect(admin.List(ctx, &mwcs, sel)).To(Succeed())
	Expect(mwcs.Items).To(HaveLen(1))
	var crs rbacv1.ClusterRoleList
	Expect(admin.List(ctx, &crs, sel)).To(Succeed())
	Expect(crs.Items).To(HaveLen(3))
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
