// Package localnode holds what the suites on the local single-node cluster (test/e2e,
// test/e2e/dra, test/olm) share: skipping loudly, running the repository's scripts, the
// suite's clients, and namespaces that are ready for pods. Gomega assertions fail the
// calling spec.
package localnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/test/framework"
)

// SkipLoudly skips every spec and says why on stderr too: `go test` without -v hides
// Ginkgo's skip messages, and a silently skipped suite looks green.
func SkipLoudly(suite, reason string) {
	fmt.Fprintf(os.Stderr, "\n*** %s SKIPPED: %s ***\n\n", suite, reason)
	ginkgo.Skip(reason)
}

// RunScript runs a repository script (path relative to root) in root, with env added to the
// process's environment, its output going to the Ginkgo log; a failure fails the spec with
// the output's tail.
func RunScript(ctx context.Context, root string, env []string, script string, args ...string) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, script), args...)
	cmd.Dir = root
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err := cmd.Run()
	ginkgo.GinkgoWriter.Printf("$ %s %s (%s)\n%s\n", script, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String())
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "%s %s failed:\n%s", script, strings.Join(args, " "), Tail(out.String(), 40))
}

// Tail is the last lines of s.
func Tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// Connect returns the rest config, a controller-runtime client (framework.NewScheme) and a
// clientset for the cluster of kubeconfig, with room for the suites' bursts of requests.
func Connect(kubeconfig string) (*rest.Config, client.Client, kubernetes.Interface) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	cfg.QPS, cfg.Burst = 200, 400
	c, err := client.New(cfg, client.Options{Scheme: framework.NewScheme()})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return cfg, c, cs
}

// CreateNamespace creates a namespace and waits for its default ServiceAccount, which must
// exist before pods are admitted.
func CreateNamespace(ctx context.Context, c client.Client, cs kubernetes.Interface, name string) {
	gomega.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(gomega.Succeed())
	gomega.Eventually(func() error {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(gomega.Succeed())
}

// DeleteNamespace deletes a namespace and waits until it is gone.
func DeleteNamespace(ctx context.Context, c client.Client, name string) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	gomega.Expect(client.IgnoreNotFound(c.Delete(ctx, ns))).To(gomega.Succeed())
	gomega.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(ns), ns))
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(gomega.BeTrue(), "namespace %s not deleted", name)
}

// PrintedFields reads the key=value fields of the first line of a container's log, the
// line the suites' pods print first; false until that line, starting with first=, is there.
func PrintedFields(log []byte, first string) (map[string]string, bool) {
	line := strings.SplitN(strings.TrimSpace(string(log)), "\n", 2)[0]
	if !strings.HasPrefix(line, first+"=") {
		return nil, false
	}
	out := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out, true
}
