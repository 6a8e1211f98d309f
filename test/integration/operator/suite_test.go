// Package operator_test runs the operator's manager against a real
// kube-apiserver (envtest) with Slicer's, NFD's, KMM's and the Prometheus
// operator's CRDs, as the operator's own ServiceAccount (impersonation) bound
// to the RBAC generated from its kubebuilder markers: a missing marker fails
// these tests with Forbidden (O11). Scenarios covered are cited by ID from
// docs/design/invariants.md.
package operator_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/slicer-operator/slicer/internal/kubeversion"
	"github.com/slicer-operator/slicer/test/framework"
	"github.com/slicer-operator/slicer/test/suite"
)

const operatorNamespace = "slicer-system"

var (
	env *framework.Env
	// admin talks to the apiserver as an administrator (the test's hands).
	admin client.Client
	// asOperator is the operator ServiceAccount's rest config.
	asOperator *rest.Config
	// serverVersion is what envtest's kube-apiserver reports.
	serverVersion kubeversion.Version
	ctx           = context.Background()
)

func TestOperator(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Operator suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	env = suite.Start(framework.Options{}, operatorNamespace)
	admin = env.Client
	Expect(framework.InstallOperatorRBAC(ctx, admin, operatorNamespace)).To(Succeed())
	asOperator = framework.ImpersonatedConfig(env.Config, operatorNamespace, framework.OperatorServiceAccount)
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	info, err := dc.ServerVersion()
	Expect(err).NotTo(HaveOccurred())
	serverVersion, err = kubeversion.Parse(info)
	Expect(err).NotTo(HaveOccurred())
})
