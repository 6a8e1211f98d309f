package operator_test

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/builder"
)

const (
	deployDevicePlugin = slicerv1alpha1.LabelGPUOperatorDeployDevicePlugin
	deployMIGManager   = slicerv1alpha1.LabelGPUOperatorDeployMIGManager
	deployDriver       = "nvidia.com/gpu.deploy.driver"
	deployDCGMExporter = "nvidia.com/gpu.deploy.dcgm-exporter"
)

// clusterPolicyCRD stands in for the NVIDIA GPU operator's ClusterPolicy CRD: what the operator
// looks for is the API it serves (nvidia.com/v1), not the GPU operator's controller, which does
// not run here. Only the group, version and kind are the GPU operator's; the schema is open.
func clusterPolicyCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "clusterpolicies.nvidia.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "nvidia.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "clusterpolicies", Singular: "clusterpolicy", Kind: "ClusterPolicy", ListKind: "ClusterPolicyList"},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
}

func gpuNodeWith(name string, labels map[string]string) *corev1.Node {
	return builder.Node(name).Labels(labels).Obj()
}

func nodeLabels(g Gomega, name string) (map[string]string, map[string]string) {
	var n corev1.Node
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: name}, &n)).To(Succeed())
	return n.Labels, n.Annotations
}

// Next to the NVIDIA GPU operator (issue 30): in Preinstalled mode, with the GPU operator's API
// served, the operator turns the GPU operator's device plugin and MIG manager off on Slicer's
// nodes through their deploy labels, leaves its driver, toolkit and DCGM exporter labels and
// every other node alone, may write nothing else on a Node, and puts back what was there when
// a node leaves Slicer and when Slicer is deleted.
var _ = Describe("Next to the NVIDIA GPU operator", Ordered, func() {
	AfterEach(cleanSlate)

	It("sets the GPU operator's deploy labels on Slicer's nodes and restores them", func() {
		crd := clusterPolicyCRD()
		Expect(admin.Create(ctx, crd)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, crd))).To(Succeed()) })
		// As the GPU operator labels a MIG-capable GPU node: every operand "true", the MIG
		// manager's label only where it found MIG (controllers/state_manager.go).
		gpuOperatorLabels := map[string]string{deployDevicePlugin: "true", deployMIGManager: "true", deployDriver: "true", deployDCGMExporter: "true"}
		withGPUOperator := gpuNodeWith("gpu-op-a", map[string]string{slicerv1alpha1.LabelMIGCapable: "true"})
		for k, v := range gpuOperatorLabels {
			withGPUOperator.Labels[k] = v
		}
		withGPUOperator.Labels[deployMIGManager] = "paused-for-mig-change"
		bare := gpuNodeWith("gpu-op-b", map[string]string{slicerv1alpha1.LabelMIGCapable: "true"})
		notSlicers := gpuNodeWith("gpu-op-c", map[string]string{deployDevicePlugin: "true"})
		for _, n := range []*corev1.Node{withGPUOperator, bare, notSlicers} {
			Expect(admin.Create(ctx, n)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, n))).To(Succeed()) })
		}

		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer(func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Mode = slicerv1alpha1.DriverModePreinstalled }))).To(Succeed())

		By("turning the device plugin and the MIG manager off on Slicer's nodes, recording what was there")
		Eventually(func(g Gomega) {
			l, a := nodeLabels(g, withGPUOperator.Name)
			g.Expect(l).To(HaveKeyWithValue(deployDevicePlugin, "false"))
			g.Expect(l).To(HaveKeyWithValue(deployMIGManager, "false"))
			g.Expect(l).To(HaveKeyWithValue(deployDriver, "true"))
			g.Expect(l).To(HaveKeyWithValue(deployDCGMExporter, "true"))
			var rec map[string]*string
			g.Expect(json.Unmarshal([]byte(a[slicerv1alpha1.AnnotationGPUOperatorLabels]), &rec)).To(Succeed())
			g.Expect(rec).To(Equal(map[string]*string{deployDevicePlugin: ptr.To("true"), deployMIGManager: ptr.To("paused-for-mig-change")}))

			l, a = nodeLabels(g, bare.Name)
			g.Expect(l).To(HaveKeyWithValue(deployDevicePlugin, "false"))
			g.Expect(l).To(HaveKeyWithValue(deployMIGManager, "false"))
			g.Expect(a).To(HaveKeyWithValue(slicerv1alpha1.AnnotationGPUOperatorLabels,
				`{"nvidia.com/gpu.deploy.device-plugin":null,"nvidia.com/gpu.deploy.mig-manager":null}`))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			l, a := nodeLabels(g, notSlicers.Name)
			g.Expect(l).To(Equal(notSlicers.Labels))
			g.Expect(a).NotTo(HaveKey(slicerv1alpha1.AnnotationGPUOperatorLabels))
		}, 2*time.Second).Should(Succeed())
		var n corev1.Node
		Expect(admin.Get(ctx, client.ObjectKey{Name: bare.Name}, &n)).To(Succeed())
		var managers []string
		for _, f := range n.ManagedFields {
			managers = append(managers, f.Manager)
		}
		Expect(managers).To(ContainElement(controller.GPUOperatorLabelsFieldManager))

		By("refusing any other Node write of the operator (the operator node guard)")
		err := asUser(asOperator).Patch(ctx, gpuNodeWith(bare.Name, nil),
			client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"nvidia.com/gpu.deploy.driver":"false"}}}`)))
		refusedBy(err, render.OperatorNodeMessage)
		err = asUser(asOperator).Patch(ctx, gpuNodeWith(bare.Name, nil),
			client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"unschedulable":true}}`)))
		refusedBy(err, render.OperatorNodeMessage)

		By("restoring a node that leaves Slicer: labels that were absent removed, record gone")
		Expect(admin.Patch(ctx, gpuNodeWith(bare.Name, nil), client.RawPatch("application/merge-patch+json",
			[]byte(`{"metadata":{"labels":{"slicer.dev/mig-capable":null}}}`)))).To(Succeed())
		Eventually(func(g Gomega) {
			l, a := nodeLabels(g, bare.Name)
			g.Expect(l).NotTo(HaveKey(deployDevicePlugin))
			g.Expect(l).NotTo(HaveKey(deployMIGManager))
			g.Expect(a).NotTo(HaveKey(slicerv1alpha1.AnnotationGPUOperatorLabels))
		}).Should(Succeed())

		By("restoring every node when the Slicer is deleted: previous values put back")
		Expect(admin.Delete(ctx, newSlicer())).To(Succeed())
		Eventually(func(g Gomega) {
			err := admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Slicer still there: %v", err)
		}, time.Minute).Should(Succeed())
		Eventually(func(g Gomega) {
			l, a := nodeLabels(g, withGPUOperator.Name)
			g.Expect(l).To(HaveKeyWithValue(deployDevicePlugin, "true"))
			g.Expect(l).To(HaveKeyWithValue(deployMIGManager, "paused-for-mig-change"))
			g.Expect(l).To(HaveKeyWithValue(deployDriver, "true"))
			g.Expect(l).To(HaveKeyWithValue(deployDCGMExporter, "true"))
			g.Expect(a).NotTo(HaveKey(slicerv1alpha1.AnnotationGPUOperatorLabels))
		}).Should(Succeed())
	})
})
