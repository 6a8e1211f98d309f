//go:build tools

// Package deps pins the project's direct dependencies until code imports them.
package deps

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	_ "k8s.io/apimachinery/pkg/runtime"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/component-base/version"
	_ "k8s.io/kube-scheduler/framework"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)
