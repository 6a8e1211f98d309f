// Package suite starts the control plane of an integration suite from its BeforeSuite, the
// one setup every suite under test/integration shares:
//
//	var _ = BeforeSuite(func() {
//		env = suite.Start(framework.Options{}, "team-a")
//		k8s = env.Client
//	})
//
// It is apart from test/framework so that the benchmarks that use framework do not link
// Ginkgo.
package suite

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/slicer-operator/slicer/test/framework"
)

// Start starts etcd and kube-apiserver with opts (framework.Start), stops them when the
// suite ends, logs the apiserver's version and creates the namespaces given. Call it from
// BeforeSuite.
func Start(opts framework.Options, namespaces ...string) *framework.Env {
	ginkgo.GinkgoHelper()
	env, err := framework.Start(opts)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(env.Stop)
	ginkgo.GinkgoWriter.Printf("kube-apiserver reports %s\n", env.ServerVersion)
	for _, ns := range namespaces {
		gomega.Expect(env.Client.Create(context.Background(), framework.MakeNamespace(ns))).To(gomega.Succeed())
	}
	return env
}
