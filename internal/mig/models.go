package mig

// This file holds the GPU model tables: one table per model, and the only place in Slicer where
// MIG geometry (profile names, NVML enums, slices, legal starts, count limits) is written down.
// Everything else (occupancy tables, policy, bounds) is derived from these tables.
//
// NVML enum values are plain integers copied from go-nvml v0.13.0-1 pkg/nvml/const.go
// (cross-checked by nvml_enum_test.go):
//
//	GPU_INSTANCE_PROFILE_1_SLICE=0 2_SLICE=1 3_SLICE=2 4_SLICE=3 7_SLICE=4
//	GPU_INSTANCE_PROFILE_1_SLICE_REV1=7 (+me) 2_SLICE_REV1=8 (+me) 1_SLICE_REV2=9 (double memory)
//	COMPUTE_INSTANCE_PROFILE_1_SLICE=0 2_SLICE=1 3_SLICE=2 4_SLICE=3 7_SLICE=4
//
// SMIProfileID is the id nvidia-smi prints (`nvidia-smi mig -lgip`).

// profileSpec is one GPU-instance profile row of a model table.
type profileSpec struct {
	name      string        // NVIDIA spelling: size and option, e.g. "1g.10gb+me"
	option    profileOption // media or graphics option (options.go), the suffix of name
	nvml      int           // GPU_INSTANCE_PROFILE_* value
	smi       int           // nvidia-smi profile id
	ci        int           // COMPUTE_INSTANCE_PROFILE_* value of the full compute instance to create
	compute   int           // compute slices
	memory    int           // memory slices (= placement size)
	maxCount  int           // instances per GPU
	starts    []int         // legal placement starts in memory slices, in NVML order
	memoryGiB int           // nominal memory in the name, informational
	minDriver int           // first driver branch with the profile (525 for R525), 0: all
}

// media reports whether the profile holds media engines no other such instance shares.
func (ps *profileSpec) media() bool { return ps.option.exclusiveMedia() }

// modelSpec is the table of one GPU model.
type modelSpec struct {
	name          string
	computeSlices int
	memorySlices  int
	memoryMiB     uint64   // nominal total memory as NVML reports it; recognition allows MemoryTolerancePercent
	pciDeviceIDs  []uint16 // PCI device ids (vendor 0x10DE); pciids_test.go says which source confirms each
	productNames  []string // NVML product names (nvmlDeviceGetName), exact, matched case-insensitively
	profiles      []profileSpec
}

// Model identifies a MIG-capable GPU model. The zero value is not a model.
type Model uint8

// The GPU models Slicer knows. Their order is stable (it is also the iteration order of
// Models()).
const (
	A30_24GB Model = iota + 1
	A100_40GB
	A100_80GB
	H100_80GB
	H100_94GB
	GH200_96GB
	H200_141GB
	B200_180GB
	GB200_186GB
	GH200_144GB
	H20_96GB
	B300_288GB
	GB300_288GB
	numModels = iota
)

// modelTables is indexed by Model. It is never written after package initialisation.
var modelTables = [numModels + 1]*modelSpec{
	A30_24GB:    &a30_24GB,
	A100_40GB:   &a100_40GB,
	A100_80GB:   &a100_80GB,
	H100_80GB:   &h100_80GB,
	H100_94GB:   &h100_94GB,
	GH200_96GB:  &gh200_96GB,
	H200_141GB:  &h200_141GB,
	B200_180GB:  &b200_180GB,
	GB200_186GB: &gb200_186GB,
	GH200_144GB: &gh200_144GB,
	H20_96GB:    &h20_96GB,
	B300_288GB:  &b300_288GB,
	GB300_288GB: &gb300_288GB,
}

// A30-24GB: 4 compute and 4 memory slices.
var a30_24GB = modelSpec{
	name:          "A30-24GB",
	computeSlices: 4,
	memorySlices:  4,
	memoryMiB:     24576,
	pciDeviceIDs:  []uint16{0x20B7},
	productNames:  []string{"NVIDIA A30"},
	profiles: []profileSpec{
		{name: "1g.6gb", nvml: 0, smi: 14, ci: 0, compute: 1, memory: 1, maxCount: 4, starts: []int{0, 1, 2, 3}, memoryGiB: 6},
		{name: "1g.6gb+me", nvml: 7, smi: 21, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3}, option: optMedia, memoryGiB: 6, minDriver: 470},
		{name: "2g.12gb", nvml: 1, smi: 5, ci: 1, compute: 2, memory: 2, maxCount: 2, starts: []int{0, 2}, memoryGiB: 12},
		{name: "2g.12gb+me", nvml: 8, smi: 6, ci: 1, compute: 2, memory: 2, maxCount: 1, starts: []int{0, 2}, option: optMedia, memoryGiB: 12, minDriver: 525},
		{name: "4g.24gb", nvml: 3, smi: 0, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 24},
	},
}

// A100-40GB (SXM4 and PCIe).
var a100_40GB = modelSpec{
	name:          "A100-40GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     40960,
	pciDeviceIDs:  []uint16{0x20B0, 0x20B1, 0x20F1, 0x20F6},
	productNames:  []string{"NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A800 40GB Active"},
	profiles: []profileSpec{
		{name: "1g.5gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 5},
		{name: "1g.5gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 5, minDriver: 470},
		{name: "1g.10gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 10, minDriver: 525},
		{name: "2g.10gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 10},
		{name: "3g.20gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 20},
		{name: "4g.20gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 20},
		{name: "7g.40gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 40},
	},
}

// A100-80GB (SXM4 and PCIe).
var a100_80GB = modelSpec{
	name:          "A100-80GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     81920,
	pciDeviceIDs:  []uint16{0x20B2, 0x20B5, 0x20F3, 0x20F5},
	productNames:  []string{"NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe", "NVIDIA A800 80GB PCIe LC"},
	profiles: []profileSpec{
		{name: "1g.10gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 10},
		{name: "1g.10gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 10, minDriver: 470},
		{name: "1g.20gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 20, minDriver: 525},
		{name: "2g.20gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 20},
		{name: "3g.40gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 40},
		{name: "4g.40gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 40},
		{name: "7g.80gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 80},
	},
}

// H100-80GB (SXM5 and PCIe; H800).
var h100_80GB = modelSpec{
	name:          "H100-80GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     81559,
	pciDeviceIDs:  []uint16{0x2330, 0x2331, 0x2322, 0x2324},
	productNames:  []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H800 PCIe", "NVIDIA H800"},
	profiles: []profileSpec{
		{name: "1g.10gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 10},
		{name: "1g.10gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 10},
		{name: "1g.20gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 20},
		{name: "2g.20gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 20},
		{name: "3g.40gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 40},
		{name: "4g.40gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 40},
		{name: "7g.80gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 80},
	},
}

// H100-94GB (H100 NVL, H100 SXM5 94GB, H800 NVL). The driver names the SXM5 94 GB part
// (0x2339) plain "NVIDIA H100".
var h100_94GB = modelSpec{
	name:          "H100-94GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     95830,
	pciDeviceIDs:  []uint16{0x2321, 0x2339, 0x233A},
	productNames:  []string{"NVIDIA H100 NVL", "NVIDIA H100", "NVIDIA H800 NVL"},
	profiles: []profileSpec{
		{name: "1g.12gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 12},
		{name: "1g.12gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 12},
		{name: "1g.24gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 24},
		{name: "2g.24gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 24},
		{name: "3g.47gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 47},
		{name: "4g.47gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 47},
		{name: "7g.94gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 94},
	},
}

// GH200-96GB: NVIDIA's "H100 96GB" geometry (H100 on GH200), which it also gives the H100 96GB
// and the PG506-232 (mig-parted's "PG506-96GB").
var gh200_96GB = modelSpec{
	name:          "GH200-96GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     97871,
	pciDeviceIDs:  []uint16{0x2342, 0x233D, 0x20B6},
	productNames:  []string{"NVIDIA GH200 120GB", "NVIDIA GH200 480GB", "NVIDIA PG506-232"},
	profiles: []profileSpec{
		{name: "1g.12gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 12},
		{name: "1g.12gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 12},
		{name: "1g.24gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 24},
		{name: "2g.24gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 24},
		{name: "3g.48gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 48},
		{name: "4g.48gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 48},
		{name: "7g.96gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 96},
	},
}

// H200-141GB (SXM and NVL).
var h200_141GB = modelSpec{
	name:          "H200-141GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     143771,
	pciDeviceIDs:  []uint16{0x2335, 0x233B},
	productNames:  []string{"NVIDIA H200", "NVIDIA H200 NVL"},
	profiles: []profileSpec{
		{name: "1g.18gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 18},
		{name: "1g.18gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 18},
		{name: "1g.35gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 35},
		{name: "2g.35gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 35},
		{name: "3g.71gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 71},
		{name: "4g.71gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 71},
		{name: "7g.141gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 141},
	},
}

// B200-180GB. Geometry as documented for A100/H100; verify on hardware when one is available.
var b200_180GB = modelSpec{
	name:          "B200-180GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     183359,
	pciDeviceIDs:  []uint16{0x2901},
	productNames:  []string{"NVIDIA B200"},
	profiles: []profileSpec{
		{name: "1g.23gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 23},
		{name: "1g.23gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 23},
		{name: "1g.45gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 45},
		{name: "2g.45gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 45},
		{name: "3g.90gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 90},
		{name: "4g.90gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 90},
		{name: "7g.180gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 180},
	},
}

// GB200-186GB (the Blackwell GPU of a GB200 superchip). Profile names and counts are mig-parted's
// for 0x2941; NVIDIA publishes no placement listing (the starts follow B200). memoryMiB is the
// 7g profile's 186 GiB, an estimate until slicer-nvml-probe reports one.
var gb200_186GB = modelSpec{
	name:          "GB200-186GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     190464,
	pciDeviceIDs:  []uint16{0x2941},
	productNames:  []string{"NVIDIA GB200"},
	profiles: []profileSpec{
		{name: "1g.23gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 23},
		{name: "1g.23gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 23},
		{name: "1g.47gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 47},
		{name: "2g.47gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 47},
		{name: "3g.93gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 93},
		{name: "4g.93gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 93},
		{name: "7g.186gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 186},
	},
}

// GH200-144GB (GH200 144G HBM3e). Profile names and counts are mig-parted's for 0x2348; NVIDIA
// publishes no placement listing. memoryMiB is what nvidia-smi reports on driver 580.
var gh200_144GB = modelSpec{
	name:          "GH200-144GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     146831,
	pciDeviceIDs:  []uint16{0x2348},
	productNames:  []string{"NVIDIA GH200 144G HBM3e"},
	profiles: []profileSpec{
		{name: "1g.18gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 18},
		{name: "1g.18gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 18},
		{name: "1g.36gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 36},
		{name: "2g.36gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 36},
		{name: "3g.72gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 72},
		{name: "4g.72gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 72},
		{name: "7g.144gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 144},
	},
}

// H20-96GB: NVIDIA's 96 GB Hopper geometry (mig-parted gives 0x2329 the GH200-96GB profiles);
// NVIDIA publishes no placement listing for it.
var h20_96GB = modelSpec{
	name:          "H20-96GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     97871,
	pciDeviceIDs:  []uint16{0x2329},
	productNames:  []string{"NVIDIA H20"},
	profiles: []profileSpec{
		{name: "1g.12gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 12},
		{name: "1g.12gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 12},
		{name: "1g.24gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 24},
		{name: "2g.24gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 24},
		{name: "3g.48gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 48},
		{name: "4g.48gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 48},
		{name: "7g.96gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 96},
	},
}

// B300-288GB (B300 SXM6 AC). Profile names and counts are mig-parted's for 0x3182; NVIDIA
// publishes no placement listing. memoryMiB is the 7g profile's 269 GiB, an estimate.
var b300_288GB = modelSpec{
	name:          "B300-288GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     275456,
	pciDeviceIDs:  []uint16{0x3182},
	productNames:  []string{"NVIDIA B300 SXM6 AC"},
	profiles: []profileSpec{
		{name: "1g.34gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 34},
		{name: "1g.34gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 34},
		{name: "1g.67gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 67},
		{name: "2g.67gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 67},
		{name: "3g.135gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 135},
		{name: "4g.135gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 135},
		{name: "7g.269gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 269},
	},
}

// GB300-288GB (the Blackwell Ultra GPU of a GB300 superchip). Profile names and counts are
// mig-parted's for 0x31C2; NVIDIA publishes no placement listing. memoryMiB is the 7g
// profile's 278 GiB, an estimate.
var gb300_288GB = modelSpec{
	name:          "GB300-288GB",
	computeSlices: 7,
	memorySlices:  8,
	memoryMiB:     284672,
	pciDeviceIDs:  []uint16{0x31C2},
	productNames:  []string{"NVIDIA GB300"},
	profiles: []profileSpec{
		{name: "1g.35gb", nvml: 0, smi: 19, ci: 0, compute: 1, memory: 1, maxCount: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}, memoryGiB: 35},
		{name: "1g.35gb+me", nvml: 7, smi: 20, ci: 0, compute: 1, memory: 1, maxCount: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, option: optMedia, memoryGiB: 35},
		{name: "1g.70gb", nvml: 9, smi: 15, ci: 0, compute: 1, memory: 2, maxCount: 4, starts: []int{0, 2, 4, 6}, memoryGiB: 70},
		{name: "2g.70gb", nvml: 1, smi: 14, ci: 1, compute: 2, memory: 2, maxCount: 3, starts: []int{0, 2, 4}, memoryGiB: 70},
		{name: "3g.139gb", nvml: 2, smi: 9, ci: 2, compute: 3, memory: 4, maxCount: 2, starts: []int{0, 4}, memoryGiB: 139},
		{name: "4g.139gb", nvml: 3, smi: 5, ci: 3, compute: 4, memory: 4, maxCount: 1, starts: []int{0}, memoryGiB: 139},
		{name: "7g.278gb", nvml: 4, smi: 0, ci: 4, compute: 7, memory: 8, maxCount: 1, starts: []int{0}, memoryGiB: 278},
	},
}
