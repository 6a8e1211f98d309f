// Module relay copies bytes between a listener and a target, each a loopback TCP address or a
// unix socket. hack/netns-run uses it to give a process in its own network namespace the
// host's loopback services (the apiserver, a catalog) through unix sockets, which cross
// network namespaces. Standard library only.
module github.com/slicer-operator/slicer/hack/tools/relay

go 1.26
