// Package cdi writes one Container Device Interface spec per realized MIG
// slice (kind slicer.dev/mig, device name = Slice.Name: the device plugin's device ID, its
// slot's, so that it survives the instance's recreation after a reboot), atomically
// (temp file + rename), and removes specs of slices that no longer exist.
//
// Emulated mode: the device's containerEdits only set environment variables
// (SLICER_MIG_DEVICE, SLICER_MIG_PROFILE, SLICER_MIG_PLACEMENT, SLICER_GPU_UUID), each
// naming that one MIG device. NVIDIA_VISIBLE_DEVICES (EnvVisibleDevices) lists all the MIG
// devices a container received. Nothing the kubelet checkpoints names a MIG UUID (it changes
// when an instance is recreated): a device plugin slice's own spec sets it to its MIG device
// (Write), and a container that receives several devices of a resource also gets a set
// device (set.go) whose spec lists them all, rewritten before each start of the container; a
// claim's spec sets it in its spec-level edits (claim.go), which the runtime applies once
// for the spec, before the devices' own. Real mode adds what NVIDIA's own CDI specs give
// a MIG device: /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, the
// parent GPU's /dev/nvidia<minor>, and the two MIG capability nodes
// /dev/nvidia-caps/nvidia-cap<N> whose minors the driver publishes in
// /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<GI>/access and
// .../gi<GI>/ci<CI>/access ("DeviceFileMinor: N"), given as character devices with the
// nvidia-caps major of /proc/devices. Driver libraries are not
// injected: the container image or the NVIDIA container toolkit provides them.
package cdi

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	// Vendor and Class make the CDI kind slicer.dev/mig.
	Vendor = "slicer.dev"
	Class  = "mig"
	// Kind is the CDI kind of Slicer's MIG devices.
	Kind = Vendor + "/" + Class
	// DefaultDir is where container runtimes look for dynamic CDI specs.
	DefaultDir = "/var/run/cdi"
)

// Environment variables a container gets with its slice.
const (
	EnvMIGDevice    = "SLICER_MIG_DEVICE"
	EnvMIGProfile   = "SLICER_MIG_PROFILE"
	EnvMIGPlacement = "SLICER_MIG_PLACEMENT"
	EnvGPUUUID      = "SLICER_GPU_UUID"
	// EnvVisibleDevices lists the MIG device UUIDs a container received, comma-separated
	// (VisibleDevices), in the order they were given.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
)

// VisibleDevices is EnvVisibleDevices' value for these MIG device UUIDs.
func VisibleDevices(migUUIDs []string) string { return strings.Join(migUUIDs, ",") }

// Slice is what a spec describes.
type Slice struct {
	// Name is the CDI device name (default: MIGUUID).
	Name string
	// MIGUUID is the MIG device UUID.
	MIGUUID string
	GPUUUID string
	// GPUMinor is the parent GPU's /dev/nvidia<minor> (real mode).
	GPUMinor int
	// Profile in its Kubernetes spelling (".me").
	Profile        string
	PlacementStart int
	PlacementSize  int
	GPUInstance    int
	ComputeInst    int
}

// Writer writes specs under Dir.
type Writer struct {
	Dir string
	// Real adds device nodes (see the package comment); otherwise env only.
	Real bool
	// ProcRoot is where /proc/driver/nvidia lives (tests); default "/proc".
	ProcRoot string
}

// QualifiedName is the fully qualified CDI device name of a device name, e.g.
// "slicer.dev/mig=GPU-…_1g.10gb_3", as the kubelet passes it to the runtime.
func QualifiedName(name string) string { return parser.QualifiedName(Vendor, Class, name) }

// fileName is the spec file of a device (a transient spec per slice).
func fileName(name string) string {
	return cdiapi.GenerateTransientSpecName(Vendor, Class, name) + ".yaml"
}

func (s Slice) name() string {
	if s.Name != "" {
		return s.Name
	}
	return s.MIGUUID
}

const filePrefix = Vendor + "-" + Class + "_"

// Path is where the spec of a device name is written.
func (w *Writer) Path(name string) string { return filepath.Join(w.Dir, fileName(name)) }

// Spec renders the CDI spec of a slice (pure, except real mode reads the
// driver's capability files).
func (w *Writer) Spec(s Slice) (*cdispec.Spec, error) {
	if err := parser.ValidateDeviceName(s.name()); err != nil {
		return nil, fmt.Errorf("CDI device name %q: %w", s.name(), err)
	}
	edits := cdispec.ContainerEdits{Env: []string{
		EnvMIGDevice + "=" + s.MIGUUID,
		EnvMIGProfile + "=" + s.Profile,
		EnvMIGPlacement + "=" + strconv.Itoa(s.PlacementStart) + ":" + strconv.Itoa(s.PlacementSize),
		EnvGPUUUID + "=" + s.GPUUUID,
	}}
	if w.Real {
		nodes, err := w.deviceNodes(s)
		if err != nil {
			return nil, err
		}
		edits.DeviceNodes = nodes
	}
	spec := &cdispec.Spec{
		Kind:    Kind,
		Devices: []cdispec.Device{{Name: s.name(), ContainerEdits: edits}},
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec version: %w", err)
	}
	spec.Version = v
	return spec, nil
}

func (w *Writer) deviceNodes(s Slice) ([]*cdispec.DeviceNode, error) {
	proc := w.ProcRoot
	if proc == "" {
		proc = "/proc"
	}
	base := filepath.Join(proc, "driver", "nvidia", "capabilities", "gpu"+strconv.Itoa(s.GPUMinor), "mig", "gi"+strconv.Itoa(s.GPUInstance))
	giMinor, err := capMinor(filepath.Join(base, "access"))
	if err != nil {
		return nil, err
	}
	ciMinor, err := capMinor(filepath.Join(base, "ci"+strconv.Itoa(s.ComputeInst), "access"))
	if err != nil {
		return nil, err
	}
	major, err := charMajor(filepath.Join(proc, "devices"), "nvidia-caps")
	if err != nil {
		return nil, err
	}
	return []*cdispec.DeviceNode{
		{Path: "/dev/nvidiactl"},
		{Path: "/dev/nvidia-uvm"},
		{Path: "/dev/nvidia-uvm-tools"},
		{Path: "/dev/nvidia" + strconv.Itoa(s.GPUMinor)},
		capNode(major, giMinor),
		capNode(major, ciMinor),
	}, nil
}

// capNode is a MIG capability's device node. With the driver's nvidia-caps major known it is
// given by type and numbers, so the runtime creates it in the container whether or not the
// host has /dev/nvidia-caps populated (nvidia-modprobe creates those nodes on demand, and
// nothing here runs it); with none (major 0), by path only, as before.
func capNode(major int64, minor int) *cdispec.DeviceNode {
	n := &cdispec.DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(minor)}
	if major > 0 {
		n.Type, n.Major, n.Minor = "c", major, int64(minor)
	}
	return n
}

// charMajor reads the major number of a character device driver from /proc/devices (0 when
// the driver has none).
func charMajor(path, driver string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("device majors: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	inChar := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "Character devices:"):
			inChar = true
		case strings.HasPrefix(line, "Block devices:"):
			inChar = false
		case inChar:
			num, name, ok := strings.Cut(line, " ")
			if ok && strings.TrimSpace(name) == driver {
				major, err := strconv.ParseInt(num, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("device majors %s: %q: %w", path, line, err)
				}
				return major, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("device majors %s: %w", path, err)
	}
	return 0, nil
}

// capMinor reads "DeviceFileMinor: N" from a driver capability file.
func capMinor(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("MIG capability: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "DeviceFileMinor:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("MIG capability %s: %w", path, err)
			}
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("MIG capability %s: %w", path, err)
	}
	return 0, fmt.Errorf("MIG capability %s: no DeviceFileMinor", path)
}

// Write renders and writes the spec of a slice atomically and returns the
// qualified device name. The device's edits also set EnvVisibleDevices to its MIG device:
// what a container that receives this one device of the resource sees (a set device
// overrides it for one that receives several: set.go).
func (w *Writer) Write(s Slice) (string, error) {
	spec, err := w.Spec(s)
	if err != nil {
		return "", err
	}
	d := &spec.Devices[0]
	d.ContainerEdits.Env = append(d.ContainerEdits.Env, EnvVisibleDevices+"="+s.MIGUUID)
	if err := w.writeSpec(w.Path(s.name()), spec); err != nil {
		return "", err
	}
	return QualifiedName(s.name()), nil
}

// writeSpec writes a spec atomically (temp file + rename) at path.
func (w *Writer) writeSpec(path string, spec *cdispec.Spec) error {
	data, err := yaml.Marshal(spec)
	if err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	if err := os.MkdirAll(w.Dir, 0o755); err != nil {
		return fmt.Errorf("CDI dir: %w", err)
	}
	tmp, err := os.CreateTemp(w.Dir, ".tmp-"+filePrefix+"*")
	if err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return errors.Join(fmt.Errorf("CDI spec: %w", err), tmp.Close(), os.Remove(tmp.Name()))
	}
	if err := tmp.Chmod(0o644); err != nil {
		return errors.Join(fmt.Errorf("CDI spec: %w", err), tmp.Close(), os.Remove(tmp.Name()))
	}
	if err := tmp.Close(); err != nil {
		return errors.Join(fmt.Errorf("CDI spec: %w", err), os.Remove(tmp.Name()))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return errors.Join(fmt.Errorf("CDI spec: %w", err), os.Remove(tmp.Name()))
	}
	return nil
}

// Remove deletes the spec of a device name; a missing spec is not an error.
func (w *Writer) Remove(name string) error {
	if err := os.Remove(w.Path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec: %w", err)
	}
	return nil
}

// List returns the device names that have a spec file (and leftover temp files
// are not listed).
func (w *Writer) List() ([]string, error) {
	entries, err := os.ReadDir(w.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list CDI specs: %w", err)
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, filePrefix) || !strings.HasSuffix(n, ".yaml") {
			continue
		}
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(n, filePrefix), ".yaml"))
	}
	return out, nil
}

// RemoveStale removes every Slicer spec (and leftover temp file) whose device
// is not in keep, and returns the removed device names. Set specs (set.go) are the device
// plugin's and stay: it rewrites one before each start of a container that uses it, and
// /var/run/cdi, a tmpfs, loses them at the next reboot.
func (w *Writer) RemoveStale(keep map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(w.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list CDI specs: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, ".tmp-"+filePrefix):
			if err := os.Remove(filepath.Join(w.Dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		case strings.HasPrefix(n, filePrefix) && strings.HasSuffix(n, ".yaml"):
			dev := strings.TrimSuffix(strings.TrimPrefix(n, filePrefix), ".yaml")
			if keep[dev] || IsSet(dev) {
				continue
			}
			if err := os.Remove(filepath.Join(w.Dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, dev)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("remove stale CDI specs: %w", err)
	}
	return removed, nil
}

// Validate reads a written spec back with the CDI library's own parser and
// validation, as a container runtime would.
func Validate(path string) error {
	spec, err := cdiapi.ReadSpec(path, 0)
	if err != nil {
		return fmt.Errorf("CDI spec %s: %w", path, err)
	}
	if spec.GetVendor() != Vendor || spec.GetClass() != Class {
		return fmt.Errorf("CDI spec %s: kind %s/%s, want %s", path, spec.GetVendor(), spec.GetClass(), Kind)
	}
	return nil
}
