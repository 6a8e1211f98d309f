package migapi

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func TestRuntimeBypass(t *testing.T) {
	node := func(handlers ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}
		for _, h := range handlers {
			n.Status.RuntimeHandlers = append(n.Status.RuntimeHandlers, corev1.NodeRuntimeHandler{Name: h})
		}
		return n
	}
	class := func(name, handler string) nodev1.RuntimeClass {
		return nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
	}
	deleting := class("old", "nvidia")
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		classes []nodev1.RuntimeClass
		reason  string
		msg     []string
	}{
		{name: "no node", node: nil},
		{name: "only runc and the default", node: node("", "runc"), classes: []nodev1.RuntimeClass{class("nvidia", "nvidia")},
			msg: []string{"offers no NVIDIA runtime handler"}},
		{name: "NVIDIA's handler, no class selects it", node: node("", "runc", "nvidia"), classes: []nodev1.RuntimeClass{class("gvisor", "runsc")},
			msg: []string{"offers the NVIDIA runtime handler nvidia, and no RuntimeClass selects it"}},
		{name: "a class selects it", node: node("", "runc", "nvidia", "nvidia-cdi"),
			classes: []nodev1.RuntimeClass{class("gpu", "nvidia-cdi"), class("gvisor", "runsc"), class("nvidia", "nvidia"), deleting},
			reason:  slicerv1alpha1.ReasonNVIDIARuntimeClass,
			msg:     []string{"RuntimeClass gpu (handler nvidia-cdi), nvidia (handler nvidia) selects", "NVIDIA_VISIBLE_DEVICES", "docs/install.md"}},
		{name: "a class naming a handler this node does not offer", node: node("", "runc"), classes: []nodev1.RuntimeClass{class("nvidia", "nvidia")}},
		{name: "a handler that only starts with the letters", node: node("nvidiax"), classes: []nodev1.RuntimeClass{class("x", "nvidiax")},
			msg: []string{"offers no NVIDIA runtime handler"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RuntimeBypass(tc.node, tc.classes)
			if got.Reason != tc.reason || got.Present() != (tc.reason != "") {
				t.Fatalf("reason = %q, want %q (%s)", got.Reason, tc.reason, got.Message)
			}
			for _, m := range tc.msg {
				if !strings.Contains(got.Message, m) {
					t.Errorf("message %q lacks %q", got.Message, m)
				}
			}
		})
	}
}
