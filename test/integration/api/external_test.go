package api_test

import (
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)

var _ = Describe("third-party CRDs", func() {
	It("round-trips an NFD NodeFeatureRule", func() {
		rule := &nfdv1alpha1.NodeFeatureRule{
			ObjectMeta: metav1.ObjectMeta{Name: "roundtrip-mig-capable"},
			Spec: nfdv1alpha1.NodeFeatureRuleSpec{Rules: []nfdv1alpha1.Rule{{
				Name:   "nvidia mig-capable gpu",
				Labels: map[string]string{"slicer.dev/mig-capable": "true"},
				MatchFeatures: nfdv1alpha1.FeatureMatcher{{
					Feature: "pci.device",
					MatchExpressions: &nfdv1alpha1.MatchExpressionSet{
						"vendor": &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchIn, Value: nfdv1alpha1.MatchValue{"10de"}},
						"device": &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchIn, Value: nfdv1alpha1.MatchValue{"2330", "20b2"}},
					},
				}},
			}}},
		}
		Expect(k8s.Create(ctx, rule)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, rule)).To(Succeed()) })
		got := &nfdv1alpha1.NodeFeatureRule{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(rule), got)).To(Succeed())
		Expect(cmp.Diff(rule.Spec, got.Spec)).To(BeEmpty())
	})

	It("round-trips a KMM Module", func() {
		mod := &kmmv1beta1.Module{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "nvidia"},
			Spec: kmmv1beta1.ModuleSpec{
				Selector: map[string]string{"slicer.dev/mig-capable": "true"},
				ModuleLoader: kmmv1beta1.ModuleLoaderSpec{Container: kmmv1beta1.ModuleLoaderContainerSpec{
					Modprobe: kmmv1beta1.ModprobeSpec{ModuleName: "nvidia", ModulesLoadingOrder: []string{"nvidia_uvm", "nvidia"}},
					KernelMappings: []kmmv1beta1.KernelMapping{{
						Regexp:         `^.*\.el9_\d+\.x86_64$`,
						ContainerImage: "quay.io/slicer/nvidia-driver:580.95.05-${KERNEL_FULL_VERSION}",
					}},
					InTreeModulesToRemove: []string{"nouveau"},
					ImagePullPolicy:       corev1.PullIfNotPresent,
				}},
			},
		}
		Expect(k8s.Create(ctx, mod)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, mod)).To(Succeed()) })
		got := &kmmv1beta1.Module{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mod), got)).To(Succeed())
		Expect(cmp.Diff(mod.Spec, got.Spec)).To(BeEmpty())
	})

	It("serves the monitoring.coreos.com kinds", func() {
		for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: kind + "List"})
			Expect(k8s.List(ctx, list)).To(Succeed(), kind)
		}
	})
})
