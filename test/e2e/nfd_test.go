package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

// nfdNamespace is where nfd-worker writes the node's NodeFeature (NFD_NS in hack/local-cluster).
const nfdNamespace = "node-feature-discovery"

// nfdSpecs checks that the node is labelled by real NFD (hack/local-cluster: nfd-master, and
// nfd-worker publishing the emulated GPUs as PCI devices) through Slicer's NodeFeatureRule, and
// that the agent follows the label. Each spec leaves the node as it found it: the Slicer's
// emulated GPUs published, the node labelled, the agent Ready. Registered inside the ordered
// container of e2e_test.go, before the uninstall.
func nfdSpecs() {
	It("labels the node through NFD: nfd-master applies Slicer's NodeFeatureRule to the NodeFeature nfd-worker published", func(ctx SpecContext) {
		var nf nfdv1alpha1.NodeFeature
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nfdNamespace, Name: node}, &nf)).To(Succeed())
		// the shape nfd-worker gives it on every node
		Expect(nf.Labels).To(HaveKeyWithValue(nfdv1alpha1.NodeFeatureObjNodeNameLabel, node))
		Expect(nf.Annotations).To(HaveKeyWithValue(nfdv1alpha1.WorkerVersionAnnotation, HavePrefix("v0.")))
		devices := nf.Spec.Features.Instances["pci.device"].Elements
		for _, m := range emulatedModels(ctx) {
			id := fmt.Sprintf("%04x", m.PCIDeviceIDs()[0])
			Expect(devices).To(ContainElement(HaveField("Attributes", SatisfyAll(
				HaveKeyWithValue("vendor", "10de"), HaveKeyWithValue("class", "0302"), HaveKeyWithValue("device", id)))),
				"no PCI device %s (%s) in the NodeFeature", id, m)
		}
		// set by nfd-master (the labels it owns are listed in its annotation), not by hand
		n := getNode(ctx)
		Expect(n.Labels).To(HaveKeyWithValue(slicerv1alpha1.LabelMIGCapable, "true"))
		Expect(nfdOwnedLabels(n)).To(ContainElements(slicerv1alpha1.LabelMIGCapable, slicerv1alpha1.LabelGPUModel))
		Expect(agentReadyOnNode(ctx)).To(Succeed())
	})

	It("relabels the node when the published GPU model changes", func(ctx SpecContext) {
		DeferCleanup(restoreNFD)
		for _, m := range []mig.Model{mig.A100_40GB, mig.H100_80GB} {
			start := time.Now()
			runScript(ctx, "hack/local-cluster", "nfd-publish", m.String()+":4")
			Eventually(func(g Gomega) {
				n := getNode(ctx)
				g.Expect(n.Labels).To(HaveKeyWithValue(slicerv1alpha1.LabelGPUModel, m.String()))
				g.Expect(n.Labels).To(HaveKeyWithValue(slicerv1alpha1.LabelMIGCapable, "true"))
			}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
			GinkgoWriter.Printf("nfd: %s published → node labelled %s=%s in %s\n", m, slicerv1alpha1.LabelGPUModel, m, time.Since(start).Round(time.Millisecond))
		}
	})

	It("removes the labels when the NodeFeature is deleted, and the agent leaves the node; publishing again brings both back", func(ctx SpecContext) {
		DeferCleanup(restoreNFD)
		agent, ok := agentPod(ctx)
		Expect(ok).To(BeTrue(), "no agent pod on the node to begin with")
		Expect(k8s.Delete(ctx, &nfdv1alpha1.NodeFeature{ObjectMeta: objectMeta(nfdNamespace, node)})).To(Succeed())
		start := time.Now()
		Eventually(func(g Gomega) {
			n := getNode(ctx)
			g.Expect(n.Labels).NotTo(HaveKey(slicerv1alpha1.LabelMIGCapable))
			g.Expect(n.Labels).NotTo(HaveKey(slicerv1alpha1.LabelGPUModel))
			g.Expect(nfdOwnedLabels(n)).NotTo(ContainElement(slicerv1alpha1.LabelMIGCapable))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		GinkgoWriter.Printf("nfd: NodeFeature deleted → labels removed in %s\n", time.Since(start).Round(time.Millisecond))
		// the DaemonSet no longer selects the node: its pod goes
		Eventually(func() bool {
			var p corev1.Pod
			return apierrors.IsNotFound(k8s.Get(ctx, agent, &p))
		}).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeTrue(), "agent pod %s still on the node", agent)
		_, ok = agentPod(ctx)
		Expect(ok).To(BeFalse(), "a new agent pod came to an unlabelled node")
		// DeferCleanup publishes the emulated GPUs again and waits for the agent
	})

	It("does not label a node whose only NVIDIA GPUs have no MIG (T4: 10de:1eb8, class 0302)", func(ctx SpecContext) {
		DeferCleanup(restoreNFD)
		runScript(ctx, "hack/local-cluster", "nfd-publish", "10de:1eb8:030200:2")
		// nfd-master has processed this NodeFeature once NFD's own PCI label names the device
		// class and vendor; Slicer's rule must not have matched it
		Eventually(func(g Gomega) {
			n := getNode(ctx)
			g.Expect(n.Labels).To(HaveKeyWithValue(nfdv1alpha1.FeatureLabelNs+"/pci-0302_10de.present", "true"))
			g.Expect(n.Labels).NotTo(HaveKey(slicerv1alpha1.LabelMIGCapable))
			g.Expect(n.Labels).NotTo(HaveKey(slicerv1alpha1.LabelGPUModel))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		var nf nfdv1alpha1.NodeFeature
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nfdNamespace, Name: node}, &nf)).To(Succeed())
		Expect(nf.Spec.Features.Instances["pci.device"].Elements).To(ContainElement(HaveField("Attributes", HaveKeyWithValue("device", "1eb8"))))
	})
}

// restoreNFD publishes the Slicer's emulated GPUs again (what hack/demo install publishes)
// and waits until the node is labelled and the agent is back and Ready.
func restoreNFD(ctx SpecContext) {
	var args []string
	var s slicerv1alpha1.Slicer
	Expect(k8s.Get(ctx, client.ObjectKey{Name: "default"}, &s)).To(Succeed())
	for _, g := range s.Spec.Agent.EmulatedGPUs {
		args = append(args, fmt.Sprintf("%s:%d", g.Model, g.Count))
	}
	runScript(ctx, "hack/local-cluster", append([]string{"nfd-publish"}, args...)...)
	Eventually(func(g Gomega) {
		g.Expect(getNode(ctx).Labels).To(HaveKeyWithValue(slicerv1alpha1.LabelMIGCapable, "true"))
		g.Expect(agentReadyOnNode(ctx)).To(Succeed())
	}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Succeed())
}

// emulatedModels are the models of the Slicer's emulated GPUs.
func emulatedModels(ctx context.Context) []mig.Model {
	var s slicerv1alpha1.Slicer
	Expect(k8s.Get(ctx, client.ObjectKey{Name: "default"}, &s)).To(Succeed())
	var out []mig.Model
	for _, g := range s.Spec.Agent.EmulatedGPUs {
		m, err := mig.ParseModel(string(g.Model))
		Expect(err).NotTo(HaveOccurred())
		out = append(out, m)
	}
	Expect(out).NotTo(BeEmpty())
	return out
}

func getNode(ctx context.Context) *corev1.Node {
	var n corev1.Node
	Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, &n)).To(Succeed())
	return &n
}

// nfdOwnedLabels lists the labels nfd-master manages on the node (its annotation; labels in
// NFD's own namespace appear without their prefix).
func nfdOwnedLabels(n *corev1.Node) []string {
	v := n.Annotations[nfdv1alpha1.FeatureLabelsAnnotation]
	if v == "" {
		return nil
	}
	l := strings.Split(v, ",")
	slices.Sort(l)
	return l
}

// agentPod finds the agent pod on the node (in whichever namespace the operator runs it).
func agentPod(ctx context.Context) (client.ObjectKey, bool) {
	var l corev1.PodList
	Expect(k8s.List(ctx, &l, client.MatchingLabels{slicerv1alpha1.LabelComponent: render.ComponentAgent})).To(Succeed())
	for _, p := range l.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return client.ObjectKeyFromObject(&p), true
		}
	}
	return client.ObjectKey{}, false
}

// agentReadyOnNode: an agent pod runs on the node and its NodeAccelerator is Ready.
func agentReadyOnNode(ctx context.Context) error {
	key, ok := agentPod(ctx)
	if !ok {
		return fmt.Errorf("no agent pod on node %s", node)
	}
	var p corev1.Pod
	if err := k8s.Get(ctx, key, &p); err != nil {
		return err
	}
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return fmt.Errorf("agent pod %s not Ready", key)
	}
	var na slicerv1alpha1.NodeAccelerator
	if err := k8s.Get(ctx, client.ObjectKey{Name: node}, &na); err != nil {
		return err
	}
	if s := framework.NodeConditionStatus(&na, slicerv1alpha1.ConditionReady); s != "True" {
		return fmt.Errorf("NodeAccelerator %s Ready=%s", node, s)
	}
	return nil
}
