//go:build tools

// Package tools pins the kustomize CLI that renders config/ (built into
// bin/tools/kustomize; see Makefile).
package tools

import _ "sigs.k8s.io/kustomize/kustomize/v5"
