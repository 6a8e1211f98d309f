package sim

import (
	"math/rand/v2"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Frontend is how a request reaches its placement.
type Frontend uint8

const (
	// SlicerScheduler is the device-plugin path: Slicer's scheduler plugin picks the node, the
	// GPU and the placement with Options.Policy.
	SlicerScheduler Frontend = iota
	// StockDRA is the stock kube-scheduler with a DRA driver that publishes each node's
	// devices in Options.Order (mig.Devices). The node is the one NodeResourcesFit's
	// LeastAllocated scores highest among those where the allocator finds a device: every pod
	// asks the same CPU and memory, so the node with the fewest pods, ties broken at random as
	// kube-scheduler does; the device is the allocator's first fit in the published order
	// (mig.FirstFitting). The driver republishes a node's order, with no lag, when the allocator
	// would otherwise pick another device than the preferred order for some profile.
	StockDRA
)

// draFrontend holds the stock scheduler's view: pods per node, the tie-break generator and
// each node's last published device list (to count republishes).
type draFrontend struct {
	order     mig.DeviceOrder
	rng       *rand.Rand
	pods      []int
	published [][]mig.DRADevice
	writes    int
}

func newDRAFrontend(order mig.DeviceOrder, seed uint64) *draFrontend {
	return &draFrontend{order: order, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

func (f *draFrontend) name() string { return "dra-stock/" + f.order.Name() }

// grow keeps the per-node state as long as the node list (elastic mode adds nodes).
func (f *draFrontend) grow(nodes []mig.Node) {
	for len(f.pods) < len(nodes) {
		i := len(f.pods)
		f.pods = append(f.pods, 0)
		f.published = append(f.published, mig.Devices(nodes[i], f.order))
	}
}

// place returns the node and the one-slice assignment the stock scheduler and allocator make,
// or -1.
func (f *draFrontend) place(nodes []mig.Node, profile string) (int, []mig.Assignment) {
	f.grow(nodes)
	best, ties := -1, 0
	var bestDev mig.DRADevice
	for i := range nodes {
		d, ok := mig.FirstFitting(nodes[i], f.published[i], profile)
		if !ok {
			continue
		}
		switch {
		case best < 0 || f.pods[i] < f.pods[best]:
			best, bestDev, ties = i, d, 1
		case f.pods[i] == f.pods[best]:
			// Reservoir sampling over the equal top scores, as kube-scheduler's selectHost.
			ties++
			if f.rng.IntN(ties) == 0 {
				best, bestDev = i, d
			}
		}
	}
	if best < 0 {
		return -1, nil
	}
	return best, []mig.Assignment{{GPU: bestDev.GPU, Profile: bestDev.Profile, Placement: bestDev.Placement}}
}

// changed records an arrival (+1) or departure (-1) on node i and republishes its devices
// when the published order would now make the allocator pick another device than the preferred
// order for some profile (a driver that republishes on every reordering would write after
// nearly every change; what matters is only the first fitting device of each profile).
func (f *draFrontend) changed(nodes []mig.Node, i, delta int) {
	f.grow(nodes)
	f.pods[i] += delta
	if f.order == mig.NameOrder {
		return // the name order never changes
	}
	next := mig.Devices(nodes[i], f.order)
	if len(nodes[i].GPUs) == 0 {
		return
	}
	// Every GPU of a simulated node is the same model.
	for _, p := range nodes[i].GPUs[0].State.Model().Profiles() {
		a, okA := mig.FirstFitting(nodes[i], f.published[i], p.Name)
		b, okB := mig.FirstFitting(nodes[i], next, p.Name)
		if okA != okB || a.GPU != b.GPU || a.Placement != b.Placement {
			f.writes++
			f.published[i] = next
			return
		}
	}
}
