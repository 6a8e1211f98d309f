package localnode

import (
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
)

// emulatedGPUsPerNode bounds the search for a GPU's index: no emulated node of the suites
// has more GPUs.
const emulatedGPUsPerNode = 16

// EmulatedGPUIndex is the index of the emulated GPU with that UUID on the node; it fails the
// spec when the node has none.
func EmulatedGPUIndex(node, uuid string) int {
	for i := range emulatedGPUsPerNode {
		if emulated.GPUUUID(node, i) == uuid {
			return i
		}
	}
	ginkgo.Fail("no emulated GPU " + uuid + " on node " + node)
	return -1
}

// BreakGPU sends the node's emulated NVML (its control file, stateFile) an XID 79 on GPU
// index: the GPU has fallen off the bus and needs a reset, as the health watchers of both
// frontends read it.
func BreakGPU(stateFile string, index int) {
	gomega.Expect(emulated.SendControl(stateFile, emulated.Control{XIDs: []emulated.ControlXID{
		{GPU: index, XID: 79, RecoveryAction: nvml.RecoveryGPUReset, Unavailable: true}}})).To(gomega.Succeed())
}

// ResetGPU tells the node's emulated NVML that GPU index was reset and is usable again.
func ResetGPU(stateFile string, index int) {
	gomega.Expect(emulated.SendControl(stateFile, emulated.Control{Recover: []int{index}})).To(gomega.Succeed())
}

// HoldGPU makes a client hold GPU index of the node's emulated NVML (as DCGM would), or lets
// it go: while held, a change of its MIG mode stays pending.
func HoldGPU(stateFile string, index int, held bool) {
	c := emulated.Control{Release: []int{index}}
	if held {
		c = emulated.Control{Hold: []int{index}}
	}
	gomega.Expect(emulated.SendControl(stateFile, c)).To(gomega.Succeed())
	gomega.Eventually(func() bool { return emulated.ControlPending(stateFile) }).WithTimeout(time.Minute).Should(gomega.BeFalse(), "the emulated NVML applied the control")
}
