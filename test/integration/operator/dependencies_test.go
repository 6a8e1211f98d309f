package operator_test

import (
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	ownControlPlane(framework.Options{WithoutExternalCRDs: true})

	It("is Available without the optional APIs the spec does not need, and says what is missing", func() {
		defer cleanSlate()
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		// Emulated GPUs, NFD opted out (nodes labelled another way),
		// monitoring left at its defaults without the Prometheus operator.
		Expect(admin.Create(ctx, newSlicer(func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated
			s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 2}}
			s.Spec.NodeSelection.NodeFeatureRule = slicerv1alpha1.FeatureDisabled
		}))).To(Succeed())

		s := waitAvailable(ns)
		Expect(condition(s, slicerv1alpha1.ConditionAvailable).Reason).To(Equal(slicerv1alpha1.ReasonAsExpected))
		Expect(condition(s, slicerv1alpha1.ConditionAvailable).Message).To(ContainSubstring("optional dependency missing for MonitoringReady"))
		nfr := condition(s, slicerv1alpha1.ConditionNodeFeatureRuleReady)
		Expect(nfr.Status).To(Equal(metav1.ConditionTrue))
		Expect(nfr.Reason).To(Equal(slicerv1alpha1.ReasonDisabled))
		mon := condition(s, slicerv1alpha1.ConditionMonitoringReady)
		Expect(mon.Status).To(Equal(metav1.ConditionFalse))
		Expect(mon.Reason).To(Equal(slicerv1alpha1.ReasonDependencyMissing))
		Expect(mon.Message).To(And(
			ContainSubstring("servicemonitors.monitoring.coreos.com"), ContainSubstring("prometheusrules.monitoring.coreos.com"),
			ContainSubstring("spec.monitoring.serviceMonitors"), ContainSubstring("spec.monitoring.prometheusRule")))
		deg := condition(s, slicerv1alpha1.ConditionDegraded)
		Expect(deg.Status).To(Equal(metav1.ConditionFalse), deg.Message)
		Expect(deg.Message).To(ContainSubstring("MonitoringReady"))
		// Only the dependencies the spec uses have a series (and can alert).
		Expect(dependencySeries(op.metrics)).To(Equal(map[string]float64{metrics.DependencyPrometheusOperator: 0, metrics.DependencyDriver: 1}))

		By("asking for the NodeFeatureRule: NFD is now required and missing")
		Eventually(func(g Gomega) {
			s := getSlicer(g)
			s.Spec.NodeSelection.NodeFeatureRule = slicerv1alpha1.FeatureEnabled
			g.Expect(admin.Update(ctx, s)).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			s := getSlicer(g)
			c := condition(s, slicerv1alpha1.ConditionAvailable)
			g.Expect(c.ObservedGeneration).To(Equal(s.Generation))
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonDependencyMissing))
			g.Expect(c.Message).To(And(ContainSubstring(slicerv1alpha1.ConditionNodeFeatureRuleReady), ContainSubstring("Node Feature Discovery is not installed")))
			nfr := condition(s, slicerv1alpha1.ConditionNodeFeatureRuleReady)
			g.Expect(nfr.Reason).To(Equal(slicerv1alpha1.ReasonDependencyMissing))
			g.Expect(nfr.Message).To(ContainSubstring("spec.nodeSelection.nodeFeatureRule to Disabled"))
			g.Expect(condition(s, slicerv1alpha1.ConditionDegraded).Reason).To(Equal(slicerv1alpha1.ReasonDependencyMissing))
		}).Should(Succeed())
		Expect(dependencySeries(op.metrics)).To(HaveKeyWithValue(metrics.DependencyNFD, 0.0))
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
			// NFD and KMM are required by the default spec: not Available,
			// and the reason says why.
			av := condition(s, slicerv1alpha1.ConditionAvailable)
			g.Expect(av.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(av.Reason).To(Equal(slicerv1alpha1.ReasonDependencyMissing))
			g.Expect(av.Message).To(And(ContainSubstring(slicerv1alpha1.ConditionNodeFeatureRuleReady+": "), ContainSubstring(slicerv1alpha1.ConditionDriverReady+": Kernel Module Management is not installed")))
			g.Expect(av.Message).NotTo(ContainSubstring(slicerv1alpha1.ConditionMonitoringReady))
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
		_, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
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

var _ = Describe("Opting out of NFD", Ordered, func() {
	AfterEach(cleanSlate)

	It("removes the NodeFeatureRule and stays Available", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		_, err := getRef(ref{nfrGVK, "", render.NodeFeatureRuleKey})
		Expect(err).NotTo(HaveOccurred())

		Eventually(func(g Gomega) {
			s := getSlicer(g)
			s.Spec.NodeSelection.NodeFeatureRule = slicerv1alpha1.FeatureDisabled
			g.Expect(admin.Update(ctx, s)).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			_, err := getRef(ref{nfrGVK, "", render.NodeFeatureRuleKey})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "NodeFeatureRule still there: %v", err)
			s := getSlicer(g)
			c := condition(s, slicerv1alpha1.ConditionNodeFeatureRuleReady)
			g.Expect(c.ObservedGeneration).To(Equal(s.Generation))
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonDisabled))
		}).Should(Succeed())
		s := waitAvailable(ns)
		Expect(condition(s, slicerv1alpha1.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
		Expect(dependencySeries(op.metrics)).NotTo(HaveKey(metrics.DependencyNFD))
	})
})
