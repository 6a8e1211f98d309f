package agent_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
)

// The NVML failures of issue 41 item 5: every call the agent makes, failing once with each
// return code the driver gives (and once slow), on the way to a slice and on its release.
// RELIABILITY.md N1–N3, N10; docs/design/invariants.md I1, I2, I5, I11.

// faultCodes are the return codes a driver gives for the failures the agent must survive.
var faultCodes = []nvml.Return{
	nvml.ErrorInsufficientResource, nvml.ErrorInUse, nvml.ErrorNotFound, nvml.ErrorGPUIsLost,
	nvml.ErrorUninitialized, nvml.ErrorDriverNotLoaded, nvml.ErrorUnknown,
}

// slowCall is how long an injected slow call takes.
const slowCall = 300 * time.Millisecond

// agentOps are the emulated operations the device-plugin agent calls (its reconciler and its
// health watcher): every one Ops lists but the possible-placements query (the conformance
// suite's, not the agent's).
func agentOps() []string {
	return slices.DeleteFunc(emulated.Ops(), func(op string) bool { return op == emulated.OpPossiblePlacements })
}

// history records every status an agent wrote, for the node's allocations and its
// NodeAccelerator, from watches opened before the writes.
type history struct {
	mu    sync.Mutex
	lines []string
	stop  func()
}

func watchHistory(node string) *history {
	GinkgoHelper()
	h := &history{}
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	allocs, err := wc.Watch(ctx, &slicerv1alpha1.SliceAllocationList{}, client.InNamespace("team-a"), client.MatchingLabels{slicerv1alpha1.LabelNode: node})
	Expect(err).NotTo(HaveOccurred())
	accels, err := wc.Watch(ctx, &slicerv1alpha1.NodeAcceleratorList{}, client.MatchingFields{"metadata.name": node})
	Expect(err).NotTo(HaveOccurred())
	h.stop = func() { allocs.Stop(); accels.Stop() }
	record := func(w watch.Interface) {
		for ev := range w.ResultChan() {
			var line string
			switch o := ev.Object.(type) {
			case *slicerv1alpha1.SliceAllocation:
				line = fmt.Sprintf("allocation %s: %s %s %s", o.Name, o.Status.State, o.Status.Reason, o.Status.Message)
			case *slicerv1alpha1.NodeAccelerator:
				var parts []string
				for _, c := range o.Status.Conditions {
					parts = append(parts, c.Type+"="+string(c.Status)+" "+c.Message)
				}
				for _, g := range o.Status.GPUs {
					parts = append(parts, fmt.Sprintf("gpu %d %s %s", g.Index, g.Health, g.HealthMessage))
				}
				line = "node: " + strings.Join(parts, "; ")
			default:
				continue
			}
			h.mu.Lock()
			h.lines = append(h.lines, line)
			h.mu.Unlock()
		}
	}
	go record(allocs)
	go record(accels)
	return h
}

// since returns the lines recorded from index i on, and the next index.
func (h *history) since(i int) ([]string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lines[i:]...), len(h.lines)
}

// faultCase is one (call, fault) pair.
type faultCase struct {
	op    string
	fault emulated.Fault
}

func (c faultCase) String() string { return c.op + " " + c.fault.String() }

// inject queues the fault for the next call of c.op; a fault on Init also makes the agent
// initialise NVML again (a driver that reports itself unloaded), and one on a call the health
// watcher makes when it subscribes makes it subscribe again (its event set fails first).
func (c faultCase) inject(b *emulated.Backend) {
	switch c.op {
	case emulated.OpInit:
		b.InjectFault(emulated.OpDriverVersion, nvml.ErrorUninitialized, 1)
	case emulated.OpEventSetCreate, emulated.OpSupportedEventTypes, emulated.OpRegisterEvents:
		b.InjectFault(emulated.OpEventSetWait, nvml.ErrorUnknown, 1)
	}
	if c.fault.Delay > 0 {
		b.InjectSlow(c.op, c.fault.Delay, 1)
		return
	}
	b.InjectFault(c.op, c.fault.Return, 1)
}

// watcher reports whether c.op is called by the health watcher alone.
func (c faultCase) watcher() bool {
	switch c.op {
	case emulated.OpEventSetCreate, emulated.OpEventSetWait, emulated.OpSupportedEventTypes, emulated.OpRegisterEvents:
		return true
	}
	return false
}

// told reports whether some status written since the fault names its return code: the
// allocation's, or the node's (a condition, a GPU's health). Faults the agent takes as the
// driver means them need not be told: NOT_FOUND on a destroy (already gone) or on a listing.
func (c faultCase) told(lines []string) bool {
	if c.fault.Return == nvml.Success {
		return true
	}
	if c.fault.Return == nvml.ErrorNotFound {
		return true
	}
	if c.op == emulated.OpEventSetCreate || c.op == emulated.OpEventSetWait {
		// The health watcher makes a new event set (counted in slicer_agent_nvml_errors_total);
		// nothing the node does changes meanwhile.
		return true
	}
	for _, l := range lines {
		if strings.Contains(l, c.fault.Return.String()) {
			return true
		}
	}
	return false
}

var _ = Describe("NVML failures at every call", func() {
	It("converges after every call fails once with every return code, or is slow, on creation and on release", func() {
		var cases []faultCase
		for _, op := range agentOps() {
			for _, r := range faultCodes {
				cases = append(cases, faultCase{op: op, fault: emulated.Fault{Return: r}})
			}
			cases = append(cases, faultCase{op: op, fault: emulated.Fault{Delay: slowCall}})
		}
		const nodes = 6
		start := time.Now()
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			failures  []string
			consumed  = map[string]int{}
			untouched []string
		)
		for w := range nodes {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				n := newNode(fmt.Sprintf("n-fault-%d", w), mig.H100_80GB)
				defer n.cleanup()
				n.start()
				hist := watchHistory(n.name)
				defer hist.stop()
				for i := w; i < len(cases); i += nodes {
					c := cases[i]
					_, mark := hist.since(0)
					GinkgoWriter.Printf("%s: %s\n", n.name, c)
					injected := 2
					c.inject(n.backend)
					if c.watcher() {
						// The health watcher calls it when it subscribes, on its own schedule:
						// the fault is taken before the slice is asked for, and once.
						injected = 1
						Eventually(func() int { return n.backend.FaultsLeft(c.op) }).WithTimeout(30*time.Second).Should(BeZero(), "%s: the watcher never called it", c)
					}
					a := n.allocate(0, "3g.40gb", 4, 4)
					ready := n.waitReady(a)
					if !c.watcher() {
						c.inject(n.backend)
					}
					n.release(a)
					n.waitGone(a)
					n.invariants()
					lines, _ := hist.since(mark)
					mu.Lock()
					for _, l := range lines {
						if strings.Contains(l, string(slicerv1alpha1.AllocationFailed)) && strings.HasPrefix(l, "allocation "+a.Name) {
							failures = append(failures, fmt.Sprintf("%s: the allocation was failed: %s", c, l))
						}
					}
					left := n.backend.FaultsLeft(c.op)
					consumed[c.op] += injected - left
					if left == injected {
						untouched = append(untouched, c.String())
					} else if !c.told(lines) {
						failures = append(failures, fmt.Sprintf("%s: no status said what happened: %q", c, lines))
					}
					if ready.Status.MIGDeviceUUID == "" {
						failures = append(failures, fmt.Sprintf("%s: Ready without a MIG device", c))
					}
					mu.Unlock()
					// A fault not consumed by now must not leak into the next case.
					n.backend.ClearFaults(c.op)
					n.backend.ClearFaults(emulated.OpDriverVersion)
					n.backend.ClearFaults(emulated.OpEventSetWait)
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		ops := slices.Sorted(func(yield func(string) bool) {
			for op := range consumed {
				if !yield(op) {
					return
				}
			}
		})
		for _, op := range ops {
			GinkgoWriter.Printf("faults consumed on %s: %d\n", op, consumed[op])
		}
		fmt.Fprintf(GinkgoWriter, "%d (call, fault) cases on %d nodes in %s\n", len(cases), nodes, elapsed.Round(time.Millisecond))
		Expect(failures).To(BeEmpty())
		// Every call the agent makes was faulted at least once (a case whose call never came
		// is listed: the table is wider than the agent's calls).
		for _, op := range agentOps() {
			Expect(consumed[op]).To(BeNumerically(">", 0), "no fault on %s was ever consumed (cases left untouched: %v)", op, untouched)
		}
	})
})
