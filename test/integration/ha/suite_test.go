// Package ha_test checks that Slicer's replicated components fail over
// (issue 17): two replicas of the scheduler, the operator and the webhook
// run against a real kube-apiserver (envtest), the active one is killed
// abruptly, and the survivor must carry on with the invariants of
// docs/design/invariants.md intact (I1, I3, I5, I8 for the scheduler; O2 for
// the operator; W1's "never locked out" for the webhook).
//
// The scheduler and the operator replicas are the real binaries, built from
// this checkout and killed with SIGKILL: a killed process writes nothing
// more and does not release its Lease, which is exactly what a crashed or
// fenced node does. (kube-scheduler cannot even be stopped in-process with
// leader election on: its OnStoppedLeading callback calls os.Exit, see
// k8s.io/kubernetes/cmd/kube-scheduler/app/server.go.)
package ha_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/slicer-operator/slicer/test/framework"
	"github.com/slicer-operator/slicer/test/suite"
)

// leaseNamespace holds the leader-election Leases (the components' namespace).
const leaseNamespace = "slicer-system"

var (
	env *framework.Env
	k8s client.Client
	// dir holds the built binaries, kubeconfigs and replica logs.
	dir string
	ctx = context.Background()
)

func TestHA(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Failover (HA) suite")
}

var _ = BeforeSuite(func() {
	ctrllog.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	env = suite.Start(framework.Options{}, leaseNamespace)
	k8s = env.Client
	var err error
	dir, err = os.MkdirTemp("", "slicer-ha-")
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	Expect(os.RemoveAll(dir)).To(Succeed())
})
