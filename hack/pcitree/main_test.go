package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDevices(t *testing.T) {
	got, err := ParseDevices([]string{"H100-80GB:2", "A100-40GB", "10DE:1EB8:030200"})
	if err != nil {
		t.Fatal(err)
	}
	h100 := Device{Vendor: "10de", Device: "2330", Class: "030200"}
	want := []Device{h100, h100, {Vendor: "10de", Device: "20b0", Class: "030200"}, {Vendor: "10de", Device: "1eb8", Class: "030200"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseDevices (-want +got):\n%s", d)
	}
	for _, bad := range []string{"T4", "H100-80GB:0", "H100-80GB:x", "10de:1eb8"} {
		if _, err := ParseDevices([]string{bad}); err == nil {
			t.Errorf("ParseDevices(%q): no error", bad)
		}
	}
}

// TestWrite checks the files NFD's pci source reads (source/pci/utils.go in
// sigs.k8s.io/node-feature-discovery: bus/pci/devices/*/{class,vendor,device,
// subsystem_vendor,subsystem_device}, "0x" and a newline stripped).
func TestWrite(t *testing.T) {
	root := filepath.Join(t.TempDir(), "sys")
	if err := os.MkdirAll(filepath.Join(root, "stale"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(root, []Device{{Vendor: "10de", Device: "2330", Class: "030200"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "stale")); !os.IsNotExist(err) {
		t.Errorf("the old tree was not replaced: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "bus", "pci", "devices"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(background)+1 {
		t.Fatalf("%d devices, want %d", len(entries), len(background)+1)
	}
	gpu := filepath.Join(root, "bus", "pci", "devices", entries[len(entries)-1].Name())
	for name, want := range map[string]string{"vendor": "0x10de\n", "device": "0x2330\n", "class": "0x030200\n", "subsystem_vendor": "0x10de\n", "subsystem_device": "0x2330\n"} {
		got, err := os.ReadFile(filepath.Join(gpu, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}
