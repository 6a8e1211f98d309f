//go:build tools

// Package tools pins the Node Feature Discovery commands hack/build-nfd.sh
// builds for the local node: nfd-master (labels nodes from NodeFeature objects
// and NodeFeatureRules) and nfd-worker (discovers a node's hardware and
// publishes it as a NodeFeature object).
package tools

import (
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-master"
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-worker"
)
