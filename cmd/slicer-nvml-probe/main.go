// Command slicer-nvml-probe prints, as JSON, what the NVIDIA driver's NVML
// reports: devices, product names, memory, MIG capability and mode, and with
// MIG on the GPU-instance profiles, their possible placements, the existing
// instances and how they compare with internal/mig's model table. It only
// reads; it never creates, destroys or changes anything. Without a driver it
// exits 1 with "NVML library not found / driver not loaded".
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
)

func main() {
	libPath := flag.String("nvml-library", "", "path of libnvidia-ml.so.1 (default: the loader's search path)")
	flag.Parse()
	if err := run(nvidia.New(*libPath), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "slicer-nvml-probe:", err)
		os.Exit(1)
	}
}

func run(lib nvml.Library, out io.Writer) (err error) {
	if err := lib.Init(); err != nil {
		if nvml.IsDriverUnavailable(err) {
			return fmt.Errorf("NVML library not found / driver not loaded: %w", err)
		}
		return fmt.Errorf("NVML init: %w", err)
	}
	defer func() {
		if serr := lib.Shutdown(); serr != nil {
			err = errors.Join(err, fmt.Errorf("NVML shutdown: %w", serr))
		}
	}()
	r, err := probe(lib)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
