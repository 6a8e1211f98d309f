// Command pcitree writes the PCI part of a sysfs tree (bus/pci/devices/<address>/ with the
// attribute files NFD's pci feature source reads: vendor, device, class, subsystem_vendor,
// subsystem_device) for the local node's emulated GPUs, so that a real nfd-worker discovers
// them as it discovers GPUs on a real node (hack/local-cluster nfd-publish).
//
//	pcitree -root DIR DEVICE...
//
// DEVICE is MODEL[:COUNT] (a GPU model of internal/mig, e.g. H100-80GB:2: vendor 10de, class
// 030200 (3D controller), the model's first PCI device id, as the emulated agent reports it)
// or VENDOR:DEVICE:CLASS[:COUNT] in hex (e.g. 10de:1eb8:030200 for a T4, which has no MIG).
// The tree also holds a host bridge and an Ethernet controller, as every real node has, so a
// rule matching "any PCI device" would be caught. DIR is replaced.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Device is one PCI function as sysfs shows it (hex, without 0x).
type Device struct {
	Vendor, Device, Class string
}

const (
	nvidiaVendor = "10de"
	// PCI class 03 (display controller), subclass 02 (3D controller): data-centre GPUs
	classGPU3D = "030200"
)

// background devices every node has (Intel 440FX host bridge, Intel 82540EM Ethernet)
var background = []Device{{Vendor: "8086", Device: "1237", Class: "060000"}, {Vendor: "8086", Device: "100e", Class: "020000"}}

var rawDevice = regexp.MustCompile(`^([0-9a-f]{4}):([0-9a-f]{4}):([0-9a-f]{6})(?::([0-9]+))?$`)

// ParseDevices turns DEVICE arguments into devices, in order.
func ParseDevices(args []string) ([]Device, error) {
	var out []Device
	for _, a := range args {
		var d Device
		count := "1"
		if m := rawDevice.FindStringSubmatch(strings.ToLower(a)); m != nil {
			d = Device{Vendor: m[1], Device: m[2], Class: m[3]}
			if m[4] != "" {
				count = m[4]
			}
		} else {
			name, c, ok := strings.Cut(a, ":")
			if ok {
				count = c
			}
			model, err := mig.ParseModel(name)
			if err != nil {
				return nil, fmt.Errorf("device %q: neither a GPU model nor VENDOR:DEVICE:CLASS: %w", a, err)
			}
			d = Device{Vendor: nvidiaVendor, Device: fmt.Sprintf("%04x", model.PCIDeviceIDs()[0]), Class: classGPU3D}
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("device %q: count must be 1..64", a)
		}
		for range n {
			out = append(out, d)
		}
	}
	return out, nil
}

// Write replaces root with a tree holding the background devices then devs, one per bus.
func Write(root string, devs []Device) error {
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("remove %s: %w", root, err)
	}
	all := append(append([]Device(nil), background...), devs...)
	for i, d := range all {
		dir := filepath.Join(root, "bus", "pci", "devices", fmt.Sprintf("0000:%02x:00.0", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		attrs := map[string]string{
			"vendor": d.Vendor, "device": d.Device, "class": d.Class,
			"subsystem_vendor": d.Vendor, "subsystem_device": d.Device,
		}
		for name, v := range attrs {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("0x"+v+"\n"), 0o444); err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
		}
	}
	return nil
}

func main() {
	root := flag.String("root", "", "directory to write (replaced); required")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: pcitree -root DIR DEVICE...   (DEVICE: MODEL[:COUNT] or VENDOR:DEVICE:CLASS[:COUNT])")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *root == "" {
		flag.Usage()
		os.Exit(2)
	}
	devs, err := ParseDevices(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "pcitree:", err)
		os.Exit(2)
	}
	if err := Write(*root, devs); err != nil {
		fmt.Fprintln(os.Stderr, "pcitree:", err)
		os.Exit(1)
	}
}
