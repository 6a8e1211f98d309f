//go:build tools

// Package tools pins the Kernel Module Management manager that
// hack/kmm/build.sh builds for hack/kmm/run.sh.
package tools

import (
	_ "github.com/rh-ecosystem-edge/kernel-module-management/cmd/manager"
)
