//go:build tools

// Package tools pins Kueue's manager (cmd/kueue), which hack/build-kueue.sh builds for the
// local node (test/e2e runs it as a host process: hack/kueue/run.sh), and with it the CRDs
// the same release ships (config/components/crd in the module).
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
