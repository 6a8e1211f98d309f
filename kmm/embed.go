// Package kmm holds the KMM Module template (kmm.sigs.x-k8s.io/v1beta1) that
// loads the NVIDIA open GPU kernel modules from Slicer's driver container.
// The operator embeds it from here and fills it in from the Slicer CR.
package kmm

import _ "embed"

// Module is module.yaml.
//
//go:embed module.yaml
var Module []byte
