// Command noop stands in for every program KMM's worker Pod runs on the local
// node, so that nothing there can touch the host kernel: it is the entrypoint
// of the no-op worker image (where KMM's real image has /usr/local/bin/worker,
// which runs modprobe) and the /bin/sh of the no-op driver image (KMM's
// image-extractor init container runs `/bin/sh -c "cp ..."` in the driver
// image). It prints its argv and exits 0, which is what KMM reads as a
// successful load (the worker container terminates with Succeeded).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("slicer kmm no-op: %q: nothing loaded\n", os.Args)
}
