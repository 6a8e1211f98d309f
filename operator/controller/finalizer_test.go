package controller

import (
	"testing"

	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Module is deleted on its own, before the agent namespace its unload
// pods run in.
func TestCleanupPhasesDeleteModulesFirst(t *testing.T) {
	module := &kmmv1beta1.Module{TypeMeta: metav1.TypeMeta{Kind: "Module"}, ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "a"}}
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	phases := cleanupPhases([]client.Object{ns, module})
	if len(phases) != 2 || len(phases[0]) != 1 || phases[0][0] != module || len(phases[1]) != 1 || phases[1][0] != ns {
		t.Errorf("phases = %v, want [[Module] [Namespace]]", phases)
	}
}
