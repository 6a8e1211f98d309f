package operator_test

import (
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/metrics"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

// O3: NFD, KMM and the Prometheus operator are not installed. The operator
// reports DependencyMissing, keeps running, installs everything else, and
// applies the rest as soon as the CRDs appear.
var _ = Describe("Optional dependencies absent, then installed (O3)", Ordered, func() {
	var (
		bare          *framework.Env
		savedEnv      *framework.Env
		savedAdmin    client.Client
		savedOperator *rest.Config
	)
	BeforeAll(func() {
		var err error
		bare, err = framework.Start(framework.Options{WithoutExternalCRDs: true})
		Expect(err).NotTo(HaveOccurred())
		savedEnv, savedAdmin, savedOperator = env, admin, asOperator
		env, admin = bare, bare.Client
		Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
		Expect(framework.InstallOperatorRBAC(ctx, admin, operatorNamespace)).To(Succeed())
		asOperator = framework.ImpersonatedConfig(bare.Config, operatorNamespace, framework.OperatorServiceAccount)
	})
	AfterAll(func() {
		env, admin, asOperator = savedEnv, savedAdmin, savedOperator
		Expect(bare.Stop()).To(Succeed())
	})

	It("degrades without crashing and converges once the CRDs are installed", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())

		Eventually(func(g Gomega) {
			_, err := framework.MarkWorkloadsAvailable(ctx, admin, operatorNamespace, ns)
			g.Expect(err).NotTo(HaveOccurred())
			s := getSlicer(g)
			for _, t := range []string{slicerv1alpha1.ConditionNodeFeatureRuleReady, slicerv1alpha1.ConditionDriverReady, slicerv1alpha1.ConditionMonitoringReady} {
				c := condition(s, t)
				g.Expect(c).NotTo(BeNil(), t)
				g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonDependencyMissing), t)
			}
			g.Expect(condition(s, slicerv1alpha1.ConditionDegraded).Reason).To(Equal(slicerv1alpha1.ReasonDependencyMissing))
			g.Expect(condition(s, slicerv1alpha1.ConditionSchedulerAvailable).Status).To(Equal(metav1.ConditionTrue))
			// KMM mode without KMM: the agent waits for the driver.
			g.Expect(condition(s, slicerv1alpha1.ConditionAgentAvailable).Reason).To(Equal(slicerv1alpha1.ReasonDependencyMissing))
		}).Should(Succeed())
		Expect(op.done).NotTo(Receive(), "the manager stopped")
		Expect(testutilGauge(op.metrics, metrics.DependencyNFD)).To(Equal(0.0))
		Expect(testutilGauge(op.metrics, metrics.DependencyKMM)).To(Equal(0.0))
		// Metrics Services and dashboards do not need the Prometheus operator.
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.WebhookName + "-metrics"}, &corev1.Service{})).To(Succeed())

		By("installing NFD, KMM and the Prometheus operator's CRDs at run time")
		_, err := envtest.InstallCRDs(bare.Config, envtest.CRDInstallOptions{
			Paths: []string{filepath.Join(framework.RepoRoot(), "config", "crd", "external")}, ErrorIfPathMissing: true,
		})
		Expect(err).NotTo(HaveOccurred())
		waitAvailable(ns)
		Eventually(func(g Gomega) { expectInstalled(g, fullInstall(ns)) }, time.Minute).Should(Succeed())
		s := getSlicer(Default)
		for _, t := range componentConditions {
			Expect(condition(s, t).Status).To(Equal(metav1.ConditionTrue), t)
		}
		Expect(testutilGauge(op.metrics, metrics.DependencyKMM)).To(Equal(1.0))
	})
})
