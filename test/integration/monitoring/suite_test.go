// Package monitoring_test checks Slicer's monitoring assets against real
// servers: the PrometheusRule against a kube-apiserver with the
// Prometheus-operator CRDs, and the rules inside a real Prometheus that
// scrapes live Slicer metrics endpoints.
package monitoring_test

import (
	"context"
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

func TestMonitoring(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Monitoring suite")
}

var _ = BeforeSuite(func() {
	env = suite.Start(framework.Options{}, "slicer-system")
	k8s = env.Client
})
