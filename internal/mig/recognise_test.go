package mig

import (
	"errors"
	"testing"
)

// A GPU is recognised by its PCI device id first, its exact name second, and never when its
// memory is more than MemoryTolerancePercent off the model's. Each "was" names what the code
// before this table did with that GPU.
func TestModelForDevice(t *testing.T) {
	for _, tc := range []struct {
		what   string
		id     uint32
		name   string
		memMiB uint64
		want   Model
		reason RecognitionReason // for want == 0
	}{
		{what: "16-bit device id", id: 0x20B0, want: A100_40GB},
		{what: "NVML's pciDeviceId", id: 0x20B010DE, want: A100_40GB},
		{what: "the name alone", name: "NVIDIA A100-SXM4-40GB", want: A100_40GB},
		{what: "go-nvml's mock name, by its id", id: 0x20B010DE, name: "Mock NVIDIA A100-SXM4-40GB", memMiB: 40960, want: A100_40GB},
		{what: "A30", id: 0x20B7, name: "NVIDIA A30", memMiB: 24576, want: A30_24GB},
		{what: "H100 PCIe", id: 0x2331, name: "NVIDIA H100 PCIe", memMiB: 81559, want: H100_80GB},
		{what: "H100 NVL by name", name: "NVIDIA H100 NVL", memMiB: 95830, want: H100_94GB},
		{what: "B200", id: 0x2901, name: "NVIDIA B200", memMiB: 183359, want: B200_180GB},
		// was H100-80GB: the driver's bare "NVIDIA H100" is the 94 GB SXM5 part
		{what: "H100 SXM5 94GB", id: 0x233910DE, name: "NVIDIA H100", memMiB: 95830, want: H100_94GB},
		{what: "NVIDIA H100 by name", name: "NVIDIA H100", memMiB: 95830, want: H100_94GB},
		// was H200: its id was not listed, its name matched, and memory was never checked
		{what: "H200 NVL", id: 0x233B10DE, name: "NVIDIA H200 NVL", memMiB: 143771, want: H200_141GB},
		// were unrecognised: ids NVIDIA groups with these geometries were missing
		{what: "A100 PCIe 40GB 0x20B1", id: 0x20B1, want: A100_40GB},
		{what: "A800 40GB Active", id: 0x20F6, name: "NVIDIA A800 40GB Active", memMiB: 40960, want: A100_40GB},
		{what: "A800 SXM4 80GB", id: 0x20F3, name: "NVIDIA A800-SXM4-80GB", memMiB: 81920, want: A100_80GB},
		{what: "A800 80GB PCIe", id: 0x20F5, name: "NVIDIA A800 80GB PCIe", memMiB: 81920, want: A100_80GB},
		{what: "H800 PCIe", id: 0x2322, name: "NVIDIA H800 PCIe", memMiB: 81559, want: H100_80GB},
		{what: "H800", id: 0x2324, name: "NVIDIA H800", memMiB: 81559, want: H100_80GB},
		{what: "H800 NVL", id: 0x233A, name: "NVIDIA H800 NVL", memMiB: 95830, want: H100_94GB},
		{what: "H100 96GB", id: 0x233D, memMiB: 97871, want: GH200_96GB},
		{what: "PG506-232", id: 0x20B6, name: "NVIDIA PG506-232", memMiB: 97871, want: GH200_96GB},
		// was GH200-96GB by a name prefix: a 144 GB GPU is not the 96 GB model
		{what: "GH200 144G HBM3e", id: 0x2348, name: "NVIDIA GH200 144G HBM3e", memMiB: 146831, want: GH200_144GB},
		{what: "GH200 144G HBM3e by name", name: "NVIDIA GH200 144G HBM3e", memMiB: 146831, want: GH200_144GB},
		{what: "GH200 144G HBM3e with 96 GB", id: 0x2348, memMiB: 97871, reason: MemoryMismatch},
		{what: "a GH200 name Slicer does not list", name: "NVIDIA GH200 96GB HBM3", memMiB: 97871, reason: UnknownGPU},
		// were unrecognised: the models added from NVIDIA's mig-parted
		{what: "GB200", id: 0x2941, name: "NVIDIA GB200", memMiB: 189000, want: GB200_186GB},
		{what: "H20", id: 0x2329, name: "NVIDIA H20", memMiB: 97871, want: H20_96GB},
		{what: "B300", id: 0x3182, name: "NVIDIA B300 SXM6 AC", memMiB: 275000, want: B300_288GB},
		{what: "GB300", id: 0x31C2, name: "NVIDIA GB300", memMiB: 284000, want: GB300_288GB},
		{what: "H20-3e, no MIG table published", id: 0x232C, name: "NVIDIA H20-3e", memMiB: 143771, reason: UnknownGPU},
		// was B200: the name matched; the 168 GB part is not the 180 GB model
		{what: "HGX B200 168GB", id: 0x2909, name: "NVIDIA B200", memMiB: 172032, reason: MemoryMismatch},
		// was H200: memory was checked only between two candidates
		{what: "an H200 id with 80 GB", id: 0x2335, name: "NVIDIA H200", memMiB: 81559, reason: MemoryMismatch},
		{what: "a T4", id: 0x1EB8, name: "Tesla T4", memMiB: 15360, reason: UnknownGPU},
		{what: "nothing known", reason: UnknownGPU},
		{what: "another vendor's id", id: 0x740F1002, reason: UnknownGPU},
	} {
		got, err := ModelForDevice(tc.id, tc.name, tc.memMiB)
		var re *RecognitionError
		switch {
		case tc.want != 0 && (err != nil || got != tc.want):
			t.Errorf("%s: ModelForDevice(%#x, %q, %d) = %v, %v; want %s", tc.what, tc.id, tc.name, tc.memMiB, got, err, tc.want)
		case tc.want == 0 && (got != 0 || !errors.As(err, &re) || re.Reason != tc.reason):
			t.Errorf("%s: ModelForDevice(%#x, %q, %d) = %v, %v; want a %s error", tc.what, tc.id, tc.name, tc.memMiB, got, err, tc.reason)
		}
	}
}

// No two models share an id or a product name: recognition never has to choose.
func TestRecognitionIsUnambiguous(t *testing.T) {
	ids, names := map[uint16]Model{}, map[string]Model{}
	for _, m := range Models() {
		for _, id := range m.PCIDeviceIDs() {
			if o, dup := ids[id]; dup {
				t.Errorf("PCI device %#04x is %s and %s", id, o, m)
			}
			ids[id] = m
		}
		for _, n := range m.ProductNames() {
			if o, dup := names[n]; dup {
				t.Errorf("product name %q is %s and %s", n, o, m)
			}
			names[n] = m
		}
	}
}
