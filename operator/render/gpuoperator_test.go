package render

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

const (
	devicePlugin = slicerv1alpha1.LabelGPUOperatorDeployDevicePlugin
	migManager   = slicerv1alpha1.LabelGPUOperatorDeployMIGManager
	record       = slicerv1alpha1.AnnotationGPUOperatorLabels
)

func gpuNode(labels, annotations map[string]string) *corev1.Node {
	return &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: labels, Annotations: annotations}}
}

func TestTurnsGPUOperatorOff(t *testing.T) {
	for _, c := range []struct {
		mode        slicerv1alpha1.DriverMode
		gpuOperator bool
		want        bool
	}{
		{slicerv1alpha1.DriverModePreinstalled, true, true},
		{slicerv1alpha1.DriverModePreinstalled, false, false},
		{slicerv1alpha1.DriverModeKMM, true, false},
		{slicerv1alpha1.DriverModeEmulated, true, false},
	} {
		o := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Mode = c.mode })
		o.Platform.GPUOperator = c.gpuOperator
		if got := TurnsGPUOperatorOff(o); got != c.want {
			t.Errorf("mode %s, GPU operator %v: %v, want %v", c.mode, c.gpuOperator, got, c.want)
		}
	}
}

func TestGPUOperatorNodeLabels(t *testing.T) {
	meta := func(labels, annotations map[string]any) map[string]any {
		m := map[string]any{"name": "gpu-1"}
		if labels != nil {
			m["labels"] = labels
		}
		if annotations != nil {
			m["annotations"] = annotations
		}
		return m
	}
	for _, c := range []struct {
		name    string
		node    *corev1.Node
		off     bool
		want    map[string]any // nil: no write
		wantErr bool
	}{
		{name: "untouched node, nothing to restore", node: gpuNode(map[string]string{devicePlugin: "true"}, nil)},
		{name: "off: records absent and present labels", node: gpuNode(map[string]string{devicePlugin: "true", "other": "x"}, nil), off: true,
			want: meta(map[string]any{devicePlugin: "false", migManager: "false"},
				map[string]any{record: `{"nvidia.com/gpu.deploy.device-plugin":"true","nvidia.com/gpu.deploy.mig-manager":null}`})},
		{name: "off and already done: no write", off: true,
			node: gpuNode(map[string]string{devicePlugin: "false", migManager: "false"}, map[string]string{record: `{"nvidia.com/gpu.deploy.device-plugin":"true"}`})},
		{name: "off, label turned back on by someone: set again, first record kept", off: true,
			node: gpuNode(map[string]string{devicePlugin: "true", migManager: "false"}, map[string]string{record: `{"nvidia.com/gpu.deploy.device-plugin":null}`}),
			want: meta(map[string]any{devicePlugin: "false", migManager: "false"}, map[string]any{record: `{"nvidia.com/gpu.deploy.device-plugin":null}`})},
		{name: "off, labels already false before Slicer: recorded as false", off: true,
			node: gpuNode(map[string]string{devicePlugin: "false", migManager: "false"}, nil),
			want: meta(map[string]any{devicePlugin: "false", migManager: "false"},
				map[string]any{record: `{"nvidia.com/gpu.deploy.device-plugin":"false","nvidia.com/gpu.deploy.mig-manager":"false"}`})},
		{name: "restore: previous value back, absent label and record left out (removed by the apply)",
			node: gpuNode(map[string]string{devicePlugin: "false", migManager: "false"},
				map[string]string{record: `{"nvidia.com/gpu.deploy.device-plugin":"true","nvidia.com/gpu.deploy.mig-manager":null}`}),
			want: meta(map[string]any{devicePlugin: "true"}, nil)},
		{name: "restore: a label someone changed since is theirs",
			node: gpuNode(map[string]string{devicePlugin: "paused", migManager: "false"},
				map[string]string{record: `{"nvidia.com/gpu.deploy.device-plugin":"true","nvidia.com/gpu.deploy.mig-manager":"true"}`}),
			want: meta(map[string]any{migManager: "true"}, nil)},
		{name: "restore: nothing was there", node: gpuNode(map[string]string{devicePlugin: "false", migManager: "false"},
			map[string]string{record: `{"nvidia.com/gpu.deploy.device-plugin":null,"nvidia.com/gpu.deploy.mig-manager":null}`}),
			want: meta(nil, nil)},
		{name: "malformed record", node: gpuNode(nil, map[string]string{record: "{"}), wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := GPUOperatorNodeLabels(c.node, c.off)
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v, want one: %v", err, c.wantErr)
			}
			switch {
			case c.want == nil && got != nil:
				t.Fatalf("writes %v, want no write", got.Object)
			case c.want != nil && got == nil:
				t.Fatalf("no write, want %v", c.want)
			case c.want != nil:
				want := map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": c.want}
				if diff := cmp.Diff(want, got.Object); diff != "" {
					t.Errorf("apply configuration (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestOperatorNodeGuard(t *testing.T) {
	o := testOptions()
	e := newPolicyEval(t, policyOf(t, Guards(o), OperatorNodeGuardName))
	operator := saUser(o.Namespace, slicerv1alpha1.OperatorName, "")
	agent := saUser(o.AgentNamespace, AgentName, "gpu-1")
	nodesGVR := corev1.SchemeGroupVersion.WithResource("nodes")
	live := gpuNode(map[string]string{"kubernetes.io/hostname": "gpu-1", slicerv1alpha1.LabelMIGCapable: "true", devicePlugin: "true"}, map[string]string{"a": "b"})
	with := func(mutate func(n *corev1.Node)) *corev1.Node {
		n := live.DeepCopy()
		mutate(n)
		return n
	}
	off := with(func(n *corev1.Node) {
		n.Labels[devicePlugin], n.Labels[migManager], n.Annotations[record] = "false", "false", "{}"
	})
	for _, c := range []struct {
		name string
		r    admissionCase
		who  string
		want string
	}{
		{"deploy labels and record set", admissionCase{op: admission.Update, old: live, obj: off}, "operator", ""},
		{"deploy labels restored, record removed", admissionCase{op: admission.Update, old: off, obj: live}, "operator", ""},
		{"another label", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) { n.Labels["nvidia.com/gpu.deploy.driver"] = "false" })}, "operator", OperatorNodeMessage},
		{"Slicer's own node label", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) { delete(n.Labels, slicerv1alpha1.LabelMIGCapable) })}, "operator", OperatorNodeMessage},
		{"another annotation", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) { n.Annotations["a"] = "c" })}, "operator", OperatorNodeMessage},
		{"a taint", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
		})}, "operator", OperatorNodeMessage},
		{"unschedulable", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) { n.Spec.Unschedulable = true })}, "operator", OperatorNodeMessage},
		{"a finalizer", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) { n.Finalizers = []string{"x"} })}, "operator", OperatorNodeMessage},
		{"an owner", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) {
			n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "u", Controller: ptr.To(true)}}
		})}, "operator", OperatorNodeMessage},
		{"delete", admissionCase{op: admission.Delete, old: live}, "operator", OperatorNodeMessage},
		{"create", admissionCase{op: admission.Create, obj: live}, "operator", OperatorNodeMessage},
		{"a driver upgrade step, its time and KMM's module version", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) {
			n.Labels[slicerv1alpha1.LabelDriverUpgrade] = string(slicerv1alpha1.DriverUpgradeDrain)
			n.Labels[KMMModuleVersionLabel(o.AgentNamespace, ModuleName)] = "v2"
			n.Annotations[slicerv1alpha1.AnnotationDriverUpgradeSince] = "2026-12-01T12:00:00Z"
		})}, "operator", ""},
		{"KMM's worker version of Slicer's Module (a migration)", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) {
			n.Labels[KMMWorkerVersionLabel(o.AgentNamespace, ModuleName)] = "v1"
		})}, "operator", ""},
		{"KMM's ready label", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) {
			n.Labels[KMMReadyLabel(o.AgentNamespace, ModuleName)] = ""
		})}, "operator", OperatorNodeMessage},
		{"KMM's version label of another Module", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) {
			n.Labels[KMMModuleVersionLabel("other", "module")] = "v2"
		})}, "operator", OperatorNodeMessage},
		{"someone else changes any label", admissionCase{op: admission.Update, old: live, obj: with(func(n *corev1.Node) { n.Labels["x"] = "y" })}, "agent", ""},
	} {
		who := operator
		if c.who == "agent" {
			who = agent
		}
		wantDenial(t, c.name, e.denial(c.r.request(t, nodesGVR, who)), c.want)
	}
}
