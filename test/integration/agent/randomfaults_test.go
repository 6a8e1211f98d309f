package agent_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

// The randomised fault run of issue 41 item 5: allocations come and go on nodes whose NVML
// fails at random (every call may fail with any return code the driver gives, or be slow)
// while the agent is restarted and killed at random crash points, until at least
// randomFaults faults were injected. After every step no device is handed to two pods;
// at the end, with the faults off, nothing is leaked (I1–I4).
const (
	randomFaults    = 1000
	randomNodes     = 4
	randomFaultRate = 0.03
	// randomMutationFaultRate is the rate for the MIG creates and destroys, which an
	// observation outnumbers tenfold.
	randomMutationFaultRate = 0.3
	randomMaxHeld           = 5
	randomSlowFaults        = 20 * time.Millisecond
)

// faultTally counts the faults a policy injected, by operation and by kind. The policy runs
// under its backend's lock; one tally is shared by the backends of one node's processes,
// which never run at once, and read after the last policy is removed.
type faultTally struct {
	mu      sync.Mutex
	byOp    map[string]int
	byFault map[string]int
	total   int
}

// policy faults calls at random with its own generator (the calls come from the agent's
// goroutines, under the backend's lock and the tally's).
func (t *faultTally) policy(r *rand.Rand) func(string) emulated.Fault {
	return func(op string) emulated.Fault {
		t.mu.Lock()
		defer t.mu.Unlock()
		rate := randomFaultRate
		switch op {
		case emulated.OpInit:
			return emulated.Fault{}
		case emulated.OpCreateGPUInstance, emulated.OpCreateComputeInstance, emulated.OpDestroyComputeInst, emulated.OpDestroyGPUInstance:
			rate = randomMutationFaultRate
		}
		if r.Float64() >= rate {
			return emulated.Fault{}
		}
		f := emulated.Fault{Delay: randomSlowFaults}
		if i := r.IntN(len(faultCodes) + 1); i < len(faultCodes) {
			f = emulated.Fault{Return: faultCodes[i]}
		}
		t.byOp[op]++
		t.byFault[f.String()]++
		t.total++
		return f
	}
}

func (t *faultTally) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// randomNode is one node of the run: its agent, what it holds, and the run's counts.
type randomNode struct {
	*node
	r         *rand.Rand
	faultRand *rand.Rand
	tally     *faultTally
	ks        *framework.KillSwitch
	live      []*slicerv1alpha1.SliceAllocation
	state     []mig.GPUState
	created   int
	released  int
	restarts  int
	crashes   int
	faultsOff bool
	// recoveries counts the steps that converged after faults were injected during them.
	recoveries int
	// nvmlErrors and failedOps are the agent's own counts (slicer_agent_nvml_errors_total,
	// slicer_agent_mig_operations_total{result!="success"}), summed over its processes.
	nvmlErrors, failedOps float64
}

func (rn *randomNode) boot(fresh bool) {
	if !fresh {
		rn.collectMetrics()
		rn.stop()
		rn.newBackend()
	}
	if !rn.faultsOff {
		rn.backend.SetFaultPolicy(rn.tally.policy(rn.faultRand))
	}
	rn.ks = &framework.KillSwitch{}
	rn.cfg = rn.ks.Config(env.Config)
	rn.start()
}

func (rn *randomNode) collectMetrics() {
	if rn.metrics == nil {
		return
	}
	for _, r := range nvmlReturnNames() {
		rn.nvmlErrors += testutil.ToFloat64(rn.metrics.NVMLErrors.WithLabelValues(r))
	}
	for _, op := range []string{"create_gi", "create_ci", "destroy_ci", "destroy_gi"} {
		rn.failedOps += testutil.ToFloat64(rn.metrics.Operations.WithLabelValues(op, "error")) + testutil.ToFloat64(rn.metrics.Operations.WithLabelValues(op, "in_use"))
	}
}

func nvmlReturnNames() []string {
	var out []string
	for _, r := range append([]nvml.Return{nvml.ErrorNotSupported, nvml.ErrorInvalidArgument}, faultCodes...) {
		out = append(out, r.String())
	}
	return out
}

// create allocates a random free (GPU, profile, placement) and waits for it to be Ready.
func (rn *randomNode) create() {
	GinkgoHelper()
	gpu := rn.r.IntN(len(rn.models))
	m := rn.models[gpu]
	var opts [][2]any
	for _, p := range m.Profiles() {
		for _, pl := range p.Placements() {
			if rn.state[gpu].CanTake(p, pl) {
				opts = append(opts, [2]any{p, pl})
			}
		}
	}
	if len(opts) == 0 {
		return
	}
	o := opts[rn.r.IntN(len(opts))]
	p, pl := o[0].(mig.Profile), o[1].(mig.Placement)
	next, err := rn.state[gpu].Take(p, pl)
	Expect(err).NotTo(HaveOccurred())
	rn.state[gpu] = next
	a := rn.allocate(gpu, mig.LegalProfileName(p.Name), int32(pl.Start), int32(pl.Size))
	rn.live = append(rn.live, a)
	rn.created++
}

// release deletes a random live allocation.
func (rn *randomNode) release() {
	GinkgoHelper()
	i := rn.r.IntN(len(rn.live))
	a := rn.live[i]
	rn.live = slices.Delete(rn.live, i, i+1)
	gpu := slices.Index(rn.gpuUUIDs(), a.Spec.GPUUUID)
	p, err := rn.models[gpu].Profile(string(a.Spec.Profile))
	Expect(err).NotTo(HaveOccurred())
	next, err := rn.state[gpu].Release(p, mig.Placement{Start: int(a.Spec.Placement.Start), Size: int(a.Spec.Placement.Size)})
	Expect(err).NotTo(HaveOccurred())
	rn.state[gpu] = next
	rn.node.release(a)
	rn.released++
}

func (rn *randomNode) gpuUUIDs() []string {
	var out []string
	for i := range rn.models {
		out = append(out, rn.gpu(i))
	}
	return out
}

// settle waits until every live allocation is Ready and every released one is gone, the
// faults still on; a crash point that fired meanwhile restarts the agent first.
func (rn *randomNode) settle(gone []*slicerv1alpha1.SliceAllocation) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		if rn.ks.Dead.Load() {
			rn.crashes++
			rn.boot(false)
		}
		for _, a := range rn.live {
			got := rn.get(a)
			g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady), "%s: %+v", a.Name, got.Status)
		}
		for _, a := range gone {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(a), &slicerv1alpha1.SliceAllocation{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s not released yet: %v", a.Name, err)
		}
	}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// noDoubleHandOut checks that no MIG device is handed to two pods: the live Ready
// allocations hold distinct MIG devices, and each one that exists is at its own slot.
func (rn *randomNode) noDoubleHandOut() {
	GinkgoHelper()
	allocs, err := framework.ListAllocations(ctx, k8s, rn.name)
	Expect(err).NotTo(HaveOccurred())
	at := map[string]emulated.Instance{}
	for _, in := range rn.backend.Instances() {
		at[in.MIGUUID] = in
	}
	owner := map[string]string{}
	for _, a := range allocs {
		if a.DeletionTimestamp != nil || a.Status.State != slicerv1alpha1.AllocationReady {
			continue
		}
		u := a.Status.MIGDeviceUUID
		Expect(owner).NotTo(HaveKey(u), "MIG device %s handed to %s and %s", u, owner[u], a.Name)
		owner[u] = a.Name
		if in, ok := at[u]; ok {
			Expect(rn.gpu(in.GPU)).To(Equal(a.Spec.GPUUUID), "%s's device is on another GPU", a.Name)
			Expect(in.Placement).To(Equal(mig.Placement{Start: int(a.Spec.Placement.Start), Size: int(a.Spec.Placement.Size)}), "%s's device is at another placement", a.Name)
		}
	}
}

var _ = Describe("Randomised NVML faults", func() {
	It(fmt.Sprintf("ends with no leak and no double hand-out after %d faults, restarts and kills", randomFaults), func() {
		start := time.Now()
		var (
			wg  sync.WaitGroup
			all []*randomNode
		)
		for w := range randomNodes {
			rn := &randomNode{node: newNode(fmt.Sprintf("n-random-%d", w), mig.H100_80GB, mig.A100_40GB),
				r: rand.New(rand.NewPCG(uint64(w)+1, 41)), faultRand: rand.New(rand.NewPCG(uint64(w)+1, 42)),
				tally: &faultTally{byOp: map[string]int{}, byFault: map[string]int{}}}
			rn.state = []mig.GPUState{mig.EmptyGPU(mig.H100_80GB), mig.EmptyGPU(mig.A100_40GB)}
			all = append(all, rn)
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				defer rn.cleanup()
				rn.boot(true)
				for rn.tally.count() < randomFaults/randomNodes {
					faultsBefore := rn.tally.count()
					var gone []*slicerv1alpha1.SliceAllocation
					switch step := rn.r.IntN(20); {
					case step < 9 && len(rn.live) < randomMaxHeld:
						rn.create()
					case step < 17 && len(rn.live) > 0:
						gone = append(gone, rn.live...)
						rn.release()
						gone = slices.DeleteFunc(gone, func(a *slicerv1alpha1.SliceAllocation) bool { return slices.Contains(rn.live, a) })
					case step < 18:
						rn.restarts++
						rn.boot(false)
					default:
						// Kill the agent at the next MIG mutation of a random kind.
						ops := []string{emulated.OpCreateGPUInstance, emulated.OpCreateComputeInstance, emulated.OpDestroyComputeInst, emulated.OpDestroyGPUInstance}
						op := ops[rn.r.IntN(len(ops))]
						rn.killAt(op, rn.ks)
						if (op == emulated.OpCreateGPUInstance || op == emulated.OpCreateComputeInstance || len(rn.live) == 0) && len(rn.live) < randomMaxHeld {
							rn.create()
						} else if len(rn.live) > 0 {
							gone = append(gone, rn.live...)
							rn.release()
							gone = slices.DeleteFunc(gone, func(a *slicerv1alpha1.SliceAllocation) bool { return slices.Contains(rn.live, a) })
						}
					}
					rn.settle(gone)
					rn.noDoubleHandOut()
					if rn.tally.count() > faultsBefore {
						rn.recoveries++
					}
				}
				// The faults off, everything released: nothing may be left.
				rn.faultsOff = true
				rn.backend.SetFaultPolicy(nil)
				rn.backend.ClearCrashPoints()
				gone := append([]*slicerv1alpha1.SliceAllocation(nil), rn.live...)
				for len(rn.live) > 0 {
					rn.release()
				}
				rn.settle(gone)
				rn.invariants()
				Expect(rn.backend.Instances()).To(BeEmpty())
				rn.collectMetrics()
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		byOp, byFault := map[string]int{}, map[string]int{}
		total, created, released, restarts, crashes, recoveries := 0, 0, 0, 0, 0, 0
		var nvmlErrors, failedOps float64
		for _, rn := range all {
			for k, v := range rn.tally.byOp {
				byOp[k] += v
			}
			for k, v := range rn.tally.byFault {
				byFault[k] += v
			}
			total += rn.tally.total
			created, released, restarts, crashes = created+rn.created, released+rn.released, restarts+rn.restarts, crashes+rn.crashes
			recoveries += rn.recoveries
			nvmlErrors, failedOps = nvmlErrors+rn.nvmlErrors, failedOps+rn.failedOps
		}
		report := fmt.Sprintf("randomised NVML faults: %d injected on %d nodes in %s; %d allocations realized, %d released; %d agent restarts, %d kills at crash points; "+
			"%d steps recovered from faults injected during them; the agents counted %.0f NVML errors and %.0f failed MIG operations\n", total, randomNodes, elapsed.Round(time.Second),
			created, released, restarts, crashes, recoveries, nvmlErrors, failedOps)
		for _, m := range []map[string]int{byOp, byFault} {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				report += fmt.Sprintf("  %-44s %d\n", k, m[k])
			}
		}
		fmt.Fprint(GinkgoWriter, report)
		AddReportEntry("randomised NVML faults", report)
		Expect(total).To(BeNumerically(">=", randomFaults))
		Expect(crashes).To(BeNumerically(">", 0), "no crash point fired")
	})
})
