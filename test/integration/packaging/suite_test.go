// Package packaging_test checks what users install: every kustomize overlay
// under config/ renders with the pinned kustomize (bin/tools/kustomize) and
// every object it renders passes a server-side dry run against the real
// kube-apiserver; the operator pod fits the namespace's Pod Security level;
// every alm-example and the CSV's Deployment are accepted by the apiserver;
// and the bundle meets the static OperatorHub rules the validators do not
// check (relatedImages, feature annotations, size, OpenShift versions); and
// the Helm chart (charts/slicer, with the pinned bin/tools/helm) lints
// strictly, renders what config/default renders, refuses bad values, and
// installs, upgrades and uninstalls against the apiserver.
package packaging_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/test/framework"
	"github.com/slicer-operator/slicer/test/suite"
)

var (
	env *framework.Env
	k8s client.Client
	ctx = context.Background()
)

func TestPackaging(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Packaging suite")
}

var _ = BeforeSuite(func() {
	_, err := os.Stat(kustomizeBin())
	Expect(err).NotTo(HaveOccurred(), "kustomize not built: run `make %s` (pinned in hack/tools/kustomize)", filepath.Join("bin", "tools", "kustomize"))
	env = suite.Start(framework.Options{})
	k8s = env.Client
})

func kustomizeBin() string {
	return filepath.Join(framework.RepoRoot(), "bin", "tools", "kustomize")
}
