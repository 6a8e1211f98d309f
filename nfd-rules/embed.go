// Package nfdrules holds the NFD NodeFeatureRule that labels nodes with a
// MIG-capable NVIDIA GPU (slicer.dev/mig-capable, slicer.dev/gpu-model).
// The operator embeds it from here; go:embed cannot reach parent folders.
package nfdrules

import _ "embed"

// NodeFeatureRule is nodefeaturerule.yaml (nfd.k8s-sigs.io/v1alpha1).
//
//go:embed nodefeaturerule.yaml
var NodeFeatureRule []byte
