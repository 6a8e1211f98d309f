// Package cli_test runs the slicer command against a real kube-apiserver: it creates
// NodeAccelerators (with status), SliceAllocations and pods and checks `slicer slice-map`'s
// output through cli.Run, the function main calls, with a real kubeconfig file.
package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/slicer-operator/slicer/test/framework"
	"github.com/slicer-operator/slicer/test/suite"
)

var (
	env *framework.Env
	k8s client.Client
	ctx = context.Background()
	// kubeconfig is a kubeconfig file for an administrator of the test apiserver.
	kubeconfig string
)

func TestCLI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "slicer CLI suite")
}

var _ = BeforeSuite(func() {
	env = suite.Start(framework.Options{WithoutExternalCRDs: true})
	k8s = env.Client
	user, err := env.Environment.AddUser(envtest.User{Name: "slicer-cli", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	data, err := user.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(kubeconfig, data, 0o600)).To(Succeed())
})
