package mig_test

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slicer-operator/slicer/internal/mig"
)

// loadPCIIDs reads the pinned NVIDIA section of the PCI ID database: device id -> name.
func loadPCIIDs(t *testing.T) map[uint16]string {
	t.Helper()
	f, err := os.Open("testdata/pci.ids.10de")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[uint16]string{}
	var header []string
	vendor := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
			header = append(header, line)
		case strings.HasPrefix(line, "10de  "):
			vendor = true
		case vendor && strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t"):
			id, name, ok := strings.Cut(strings.TrimPrefix(line, "\t"), "  ")
			v, err := strconv.ParseUint(id, 16, 16)
			if !ok || err != nil {
				t.Fatalf("pci.ids.10de: bad device line %q", line)
			}
			out[uint16(v)] = name
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// The copy says what it is a copy of, and under which licence it is redistributed.
	for _, want := range []string{"# Source:  https://github.com/pciutils/pciids", "# Commit:  ", "#\tVersion: ",
		"#\tThis file can be distributed under either the GNU General Public License", "#\t(version 2 or higher) or the 3-clause BSD License."} {
		if !slices.ContainsFunc(header, func(h string) bool { return strings.HasPrefix(h, want) }) {
			t.Errorf("pci.ids.10de header lacks %q", want)
		}
	}
	if len(out) < 1000 {
		t.Fatalf("pci.ids.10de lists %d NVIDIA devices: not the whole vendor section", len(out))
	}
	return out
}

// Where each PCI device id Slicer lists was confirmed. pciids is the name in the pinned PCI ID
// database (testdata/pci.ids.10de, pciutils/pciids 2026.08.22); driver is the product name NVIDIA's
// driver gives it (the "Compatible GPUs" table of the README of NVIDIA's open GPU kernel modules,
// driver 610.43.03; "" where that table has no entry); mig is NVIDIA's word that the part runs
// that model's MIG geometry.
var pciSources = []struct {
	id     uint16
	model  mig.Model
	pciids string
	driver string
	mig    string
}{
	{0x20B7, mig.A30_24GB, "GA100GL [A30 PCIe]", "NVIDIA A30", "MIG guide (A30-24GB); mig-parted A30-24GB"},
	{0x20B0, mig.A100_40GB, "GA100 [A100 SXM4 40GB]", "NVIDIA A100-SXM4-40GB", "MIG guide (A100-SXM4-40GB); mig-parted A100-40GB"},
	{0x20B1, mig.A100_40GB, "GA100 [A100 PCIe 40GB]", "", "mig-parted A100-40GB device-filter"},
	{0x20F1, mig.A100_40GB, "GA100 [A100 PCIe 40GB]", "NVIDIA A100-PCIE-40GB", "MIG guide (A100-PCIE 40GB); mig-parted A100-40GB"},
	{0x20F6, mig.A100_40GB, "GA100 [A800 40GB PCIe]", "NVIDIA A800 40GB Active", "mig-parted A800-40GB device-filter"},
	{0x20B2, mig.A100_80GB, "GA100 [A100 SXM4 80GB]", "NVIDIA A100-SXM4-80GB", "MIG guide (A100-SXM4 80GB); mig-parted A100-80GB"},
	{0x20B5, mig.A100_80GB, "GA100 [A100 PCIe 80GB]", "NVIDIA A100 80GB PCIe", "MIG guide (A100-PCIE 80GB); mig-parted A100-80GB"},
	{0x20F3, mig.A100_80GB, "GA100 [A800-SXM4-80GB]", "NVIDIA A800-SXM4-80GB", "mig-parted A800-80GB device-filter"},
	{0x20F5, mig.A100_80GB, "GA100 [A800 80GB PCIe]", "NVIDIA A800 80GB PCIe", "mig-parted A800-80GB device-filter"},
	{0x2330, mig.H100_80GB, "GH100 [H100 SXM5 80GB]", "NVIDIA H100 80GB HBM3", "MIG guide (H100-SXM5 80GB); mig-parted H100-80GB"},
	{0x2331, mig.H100_80GB, "GH100 [H100 PCIe]", "NVIDIA H100 PCIe", "MIG guide (H100-PCIE 80GB); mig-parted H100-80GB"},
	{0x2322, mig.H100_80GB, "GH100 [H800 PCIe]", "NVIDIA H800 PCIe", "mig-parted H800-80GB device-filter"},
	{0x2324, mig.H100_80GB, "GH100 [H800]", "NVIDIA H800", "mig-parted H800-80GB device-filter"},
	{0x2321, mig.H100_94GB, "GH100 [H100L 94GB]", "NVIDIA H100 NVL", "MIG guide (H100-PCIE 94GB); mig-parted H100 NVL"},
	{0x2339, mig.H100_94GB, "GH100 [H100 SXM5 94GB]", "NVIDIA H100", "MIG guide (H100-SXM5 94GB)"},
	{0x233A, mig.H100_94GB, "GH100 [H800L 94GB]", "NVIDIA H800 NVL", "mig-parted H800 NVL device-filter"},
	{0x2342, mig.GH200_96GB, "GH100 [GH200 120GB / 480GB]", "NVIDIA GH200 480GB", "MIG guide (H100 on GH200 96GB); mig-parted GH200"},
	{0x233D, mig.GH200_96GB, "GH100 [H100 96GB]", "", "mig-parted H100-96GB device-filter"},
	{0x20B6, mig.GH200_96GB, "GA100GL [PG506-232]", "NVIDIA PG506-232", "mig-parted PG506-96GB device-filter"},
	{0x2335, mig.H200_141GB, "GH100 [H200 SXM 141GB]", "NVIDIA H200", "MIG guide (H200-SXM5 141GB); mig-parted H200-141GB"},
	{0x233B, mig.H200_141GB, "GH100 [H200 NVL]", "NVIDIA H200 NVL", "MIG guide (H200 NVL 141GB); mig-parted H200 NVL"},
	{0x2901, mig.B200_180GB, "GB100 [B200]", "NVIDIA B200", "MIG guide (B200 180GB); mig-parted B200"},
	{0x2941, mig.GB200_186GB, "GB100 [HGX GB200]", "NVIDIA GB200", "MIG guide (GB200 186GB); mig-parted GB200 HGX device-filter"},
	{0x2348, mig.GH200_144GB, "GH100 [GH200 144G HBM3e]", "NVIDIA GH200 144G HBM3e", "mig-parted GH200 144G HBM3e device-filter"},
	{0x2329, mig.H20_96GB, "GH100 [H20]", "NVIDIA H20", "MIG guide (H20 96GB); mig-parted H20 in the 96 GB device-filter"},
	{0x3182, mig.B300_288GB, "GB110 [B300 SXM6 AC]", "NVIDIA B300 SXM6 AC", "mig-parted B300 device-filter"},
	{0x31C2, mig.GB300_288GB, "GB110 [GB300]", "NVIDIA GB300", "mig-parted GB300 device-filter"},
}

// Product names NVIDIA's driver gives a model's parts under a PCI id already listed above
// (the same README table, by subsystem): they are recognised by the id, and by name too.
var driverNames = map[string]uint16{
	"NVIDIA GH200 120GB":       0x2342,
	"NVIDIA A800 80GB PCIe LC": 0x20F5,
}

// Every PCI device id internal/mig lists is one the PCI ID database names, with the name a
// source of NVIDIA's gives; every product name is one NVIDIA's driver uses for one of the model's
// ids. An id or a name that no source confirms fails here.
func TestPCIDeviceIDsAgainstPCIIDs(t *testing.T) {
	db := loadPCIIDs(t)
	listed := map[uint16]mig.Model{}
	for _, m := range mig.Models() {
		for _, id := range m.PCIDeviceIDs() {
			if other, dup := listed[id]; dup {
				t.Errorf("PCI device %#04x is listed by %s and %s", id, other, m)
			}
			listed[id] = m
		}
	}
	names := map[string]mig.Model{}
	confirmed := map[uint16]bool{}
	for _, src := range pciSources {
		confirmed[src.id] = true
		if got := listed[src.id]; got != src.model {
			t.Errorf("PCI device %#04x: internal/mig lists it for %v, the sources for %s (%s)", src.id, got, src.model, src.mig)
		}
		if got, ok := db[src.id]; !ok || got != src.pciids {
			t.Errorf("PCI device %#04x: pci.ids says %q, want %q", src.id, got, src.pciids)
		}
		if src.driver != "" {
			names[src.driver] = src.model
		}
		// What the agent sees on such a GPU is recognised as the model.
		got, err := mig.ModelForDevice(uint32(src.id)<<16|0x10DE, src.driver, src.model.MemoryMiB())
		if err != nil || got != src.model {
			t.Errorf("ModelForDevice(%#04x, %q) = %v, %v; want %s", src.id, src.driver, got, err, src.model)
		}
	}
	for name, id := range driverNames {
		names[name] = listed[id]
	}
	for id, m := range listed {
		if !confirmed[id] {
			t.Errorf("PCI device %#04x (%s) is confirmed by no source in pciSources", id, m)
		}
	}
	for _, m := range mig.Models() {
		var unconfirmed []string
		for _, n := range m.ProductNames() {
			if names[n] != m {
				unconfirmed = append(unconfirmed, n)
			}
		}
		if diff := cmp.Diff([]string(nil), unconfirmed); diff != "" {
			t.Errorf("%s lists product names NVIDIA's driver does not give its parts:\n%s", m, diff)
		}
	}
}

func ExampleModelForDevice() {
	m, err := mig.ModelForDevice(0x233910DE, "NVIDIA H100", 95830)
	fmt.Println(m, err)
	_, err = mig.ModelForDevice(0x233510DE, "NVIDIA H200", 81559)
	fmt.Println(err)
	// Output:
	// H100-94GB <nil>
	// GPU "NVIDIA H200" (PCI device 0x2335, 81559 MiB) is not a H200-141GB: its memory is more than 5% off the H200-141GB's 143771 MiB
}
