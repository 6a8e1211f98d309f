// Package api_test checks Slicer's CRDs against a real kube-apiserver: every
// validation rule accepts a valid object and rejects an invalid one with the
// expected field path, and the NFD and KMM kinds round-trip.
package api_test

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

func TestAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "API validation suite")
}

var _ = BeforeSuite(func() {
	env = suite.Start(framework.Options{}, "team-a")
	k8s = env.Client
})
