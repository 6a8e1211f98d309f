// Module mkimage builds single-layer OCI image archives from local files
// (no registry, no container engine) for the local node (hack/local-cluster),
// plus the static pause binary used as the pod sandbox image.
module github.com/slicer-operator/slicer/hack/tools/mkimage

go 1.25.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/google/go-containerregistry v0.20.6
)

require (
	github.com/containerd/stargz-snapshotter/estargz v0.16.3 // indirect
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/vbatts/tar-split v0.12.1 // indirect
	golang.org/x/sync v0.15.0 // indirect
)
