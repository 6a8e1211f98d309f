package packaging_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/test/framework"
)

const fieldOwner = client.FieldOwner("packaging-test")

// render runs the pinned kustomize over config/<dir>.
func render(dir string) []*unstructured.Unstructured {
	cmd := exec.Command(kustomizeBin(), "build", filepath.Join(framework.RepoRoot(), "config", dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "kustomize build config/%s: %s", dir, stderr.String())
	return decode(out)
}

func decode(raw []byte) []*unstructured.Unstructured {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		Expect(err).NotTo(HaveOccurred())
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func readFile(parts ...string) []byte {
	raw, err := os.ReadFile(filepath.Join(append([]string{framework.RepoRoot()}, parts...)...))
	Expect(err).NotTo(HaveOccurred())
	return raw
}

func id(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", u.GroupVersionKind().Kind, u.GetNamespace(), u.GetName())
}

// dryRunApply server-side applies u without persisting it.
func dryRunApply(u *unstructured.Unstructured) error {
	c := u.DeepCopy()
	c.SetResourceVersion("")
	return k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(c), fieldOwner, client.ForceOwnership, client.DryRunAll)
}

// apply server-side applies u for real (namespaces and service accounts the
// dry runs of namespaced objects and pods need).
func apply(u *unstructured.Unstructured) {
	c := u.DeepCopy()
	Expect(k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(c), fieldOwner, client.ForceOwnership)).To(Succeed(), id(u))
}

func toDeployment(u *unstructured.Unstructured) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	Expect(k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d)).To(Succeed())
	return d
}

// podOf is the pod a Deployment would create, in namespace ns.
func podOf(spec corev1.PodTemplateSpec, ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: spec.Labels, Annotations: spec.Annotations},
		Spec:       *spec.Spec.DeepCopy(),
	}
}

// kubeMinors are the Kubernetes minors a scheduler is built for, found where
// the build finds them (Makefile, docs/design/k8s-minors.md): one nested
// module scheduler/k8s-1.N per older minor, and the main module's
// k8s.io/kubernetes minor.
func kubeMinors() []string {
	dirs, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "scheduler", "k8s-1.*", "go.mod"))
	Expect(err).NotTo(HaveOccurred())
	var minors []string
	for _, d := range dirs {
		minors = append(minors, strings.TrimPrefix(filepath.Base(filepath.Dir(d)), "k8s-"))
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes v1\.(\d+)\.\d+`).FindSubmatch(readFile("go.mod"))
	Expect(m).NotTo(BeNil(), "go.mod requires no k8s.io/kubernetes")
	minors = append(minors, "1."+string(m[1]))
	return minors
}

// schedulerImageEnv is the operator's variable for the scheduler image of a minor ("1.35").
func schedulerImageEnv(minor string) string {
	return "RELATED_IMAGE_SCHEDULER_K8S_" + strings.ReplaceAll(minor, ".", "_")
}
