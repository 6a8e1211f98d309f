// Package drivercontainer holds the Containerfile of the NVIDIA driver
// container. The operator embeds it into the ConfigMap that a KMM in-cluster
// build reads (Module kernelMappings[].build.dockerfileConfigMap).
package drivercontainer

import _ "embed"

// Containerfile is the driver container's build file.
//
//go:embed Containerfile
var Containerfile []byte

// ConfigMapKey is the key KMM reads the build file from.
const ConfigMapKey = "dockerfile"
