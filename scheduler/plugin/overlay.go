package plugin

import (
	"context"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// The framework simulates other pods on a node without touching the cluster: the preemption
// dry run removes victims (and gives some back), and a pod is filtered with the nominated
// pods of equal or higher priority added. It tells the plugins through
// PreFilterExtensions.AddPod/RemovePod on a clone of the cycle state; Filter then reads the
// node's occupancy through the overlay kept there, never the snapshot alone.

const overlayKey fwk.StateKey = Name + "/overlay"

// overlay is, per node, the pods taken away from the snapshot and the pods added to it.
type overlay struct {
	nodes map[string]*nodeOverlay
}

type nodeOverlay struct {
	// removed pods give back every slot they hold on the node.
	removed map[types.UID]bool
	// added pods (nominated, no slot yet) take these slots; block makes every GPU of the
	// node unusable: an added pod whose slots are unknown and fit nowhere.
	added map[types.UID]addedPod
}

type addedPod struct {
	slots []snapshot.Slot
	block bool
}

// Clone implements fwk.StateData: a deep copy, since each clone is changed on its own.
func (o *overlay) Clone() fwk.StateData {
	out := &overlay{nodes: make(map[string]*nodeOverlay, len(o.nodes))}
	for name, n := range o.nodes {
		out.nodes[name] = &nodeOverlay{removed: maps.Clone(n.removed), added: maps.Clone(n.added)}
	}
	return out
}

func (n *nodeOverlay) empty() bool { return n == nil || (len(n.removed) == 0 && len(n.added) == 0) }

func readOverlay(cs fwk.CycleState) *overlay {
	d, err := cs.Read(overlayKey)
	if err != nil {
		return nil
	}
	o, _ := d.(*overlay)
	return o
}

func nodeOverlayFor(cs fwk.CycleState, node string) *nodeOverlay {
	o := readOverlay(cs)
	if o == nil {
		o = &overlay{nodes: map[string]*nodeOverlay{}}
		cs.Write(overlayKey, o)
	}
	n := o.nodes[node]
	if n == nil {
		n = &nodeOverlay{removed: map[types.UID]bool{}, added: map[types.UID]addedPod{}}
		o.nodes[node] = n
	}
	return n
}

// PreFilterExtensions implements fwk.PreFilterPlugin: AddPod and RemovePod keep the overlay.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return p }

// AddPod implements fwk.PreFilterExtensions: podInfoToAdd is simulated on the node. A pod the
// snapshot already shows there (a victim given back) is simply no longer removed; a pod with no
// slot yet (a nominated pod) takes the placement preemption cleared for it, else where the
// Slicer policy would place it now.
func (p *Plugin) AddPod(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, podInfoToAdd fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	if _, err := cs.Read(stateKey); err != nil {
		return nil // the pod being scheduled asks for no slice: Filter is skipped
	}
	pod := podInfoToAdd.GetPod()
	if nodeInfo.Node() == nil || !asksForGPUs(pod) {
		return nil
	}
	p.addPod(nodeOverlayFor(cs, nodeInfo.Node().Name), nodeInfo.Node().Name, pod)
	return nil
}

func (p *Plugin) addPod(ov *nodeOverlay, node string, pod *corev1.Pod) {
	if ov.removed[pod.UID] {
		delete(ov.removed, pod.UID)
		return
	}
	if _, ok := ov.added[pod.UID]; ok || p.cache.PodClaimsOn(pod.UID, node) {
		return
	}
	if slots := p.held.slots(pod.UID, node); slots != nil {
		ov.added[pod.UID] = addedPod{slots: slots}
		return
	}
	ov.added[pod.UID] = p.placeAdded(ov, node, pod)
}

// placeAdded places a pod with no recorded placement where the policy would now, on the node
// as the overlay has it; when it fits nowhere, it blocks the node, as kube-scheduler counts a
// nominated pod's resources whether or not they are free yet.
func (p *Plugin) placeAdded(ov *nodeOverlay, node string, pod *corev1.Pod) addedPod {
	if whole, err := wholeRequest(pod); err == nil && whole > 0 {
		return p.placeAddedWhole(ov, node, whole)
	}
	items, err := PodRequest(pod)
	if err != nil || items == nil {
		return addedPod{}
	}
	req, err := mig.NewRequest(items...)
	if err != nil {
		return addedPod{}
	}
	n := p.cache.Node(node)
	if n == nil {
		return addedPod{}
	}
	as, err := mig.Place(p.applyOverlay(n, ov), req)
	if err != nil {
		return addedPod{block: true}
	}
	out := addedPod{}
	for i, a := range as {
		out.slots = append(out.slots, snapshot.Slot{Slot: mig.Slot{GPU: n.GPUs[a.GPU].UUID, Profile: a.Profile.Name, Placement: a.Placement}, Index: int32(i)})
	}
	return out
}

// RemovePod implements fwk.PreFilterExtensions: the pod's slots on the node are free in the
// simulation.
func (p *Plugin) RemovePod(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, podInfoToRemove fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	if _, err := cs.Read(stateKey); err != nil {
		return nil
	}
	pod := podInfoToRemove.GetPod()
	if nodeInfo.Node() == nil || !asksForGPUs(pod) {
		return nil
	}
	p.removePod(nodeOverlayFor(cs, nodeInfo.Node().Name), nodeInfo.Node().Name, pod.UID)
	return nil
}

func (p *Plugin) removePod(ov *nodeOverlay, node string, uid types.UID) {
	if _, ok := ov.added[uid]; ok {
		delete(ov.added, uid)
		return
	}
	if p.cache.PodClaimsOn(uid, node) {
		ov.removed[uid] = true
	}
}

// nodeView is the node's occupancy for pod as the cycle state's overlay has it, with the rooms
// held for other nominated pods the framework did not add (heldOverlay): the snapshot itself
// when nothing is simulated or held there.
func (p *Plugin) nodeView(cs fwk.CycleState, n *snapshot.Node, pod *corev1.Pod) mig.Node {
	var ov *nodeOverlay
	if o := readOverlay(cs); o != nil {
		ov = o.nodes[n.Name]
	}
	if held := p.heldOverlay(ov, n.Name, pod); held != nil {
		ov = held
	}
	return p.applyOverlay(n, ov)
}

// applyOverlay computes the node's GPUs with the overlay's removed pods' slots released, then
// the added pods' slots taken (in UID order). A slot that cannot be taken (the victims of a
// nominated pod still hold it) makes its GPU unusable in the view, so no pod of lower priority
// takes room being cleared for a nominated one.
func (p *Plugin) applyOverlay(n *snapshot.Node, ov *nodeOverlay) mig.Node {
	if ov.empty() {
		return n.MIG
	}
	out := mig.Node{GPUs: slices.Clone(n.MIG.GPUs)}
	byUUID := make(map[string]int, len(n.GPUs))
	for i, g := range n.GPUs {
		byUUID[g.UUID] = i
	}
	if len(ov.removed) > 0 {
		for gpu, claims := range p.cache.Claims(n.Name) {
			i, ok := byUUID[gpu]
			if !ok {
				continue
			}
			for _, c := range claims {
				if !ov.removed[c.PodUID] {
					continue
				}
				g := &out.GPUs[i]
				if c.Slot.Whole() {
					g.InUse = false // the GPU keeps its mode, free for a whole-GPU request
					continue
				}
				if prof, err := g.State.Model().Profile(c.Slot.Profile); err == nil {
					if next, err := g.State.Release(prof, c.Slot.Placement); err == nil {
						g.State = next
					}
				}
			}
		}
	}
	for _, uid := range slices.Sorted(maps.Keys(ov.added)) {
		a := ov.added[uid]
		if a.block {
			for i := range out.GPUs {
				out.GPUs[i].Usable = false
			}
			continue
		}
		for _, s := range a.slots {
			i, ok := byUUID[s.GPU]
			if !ok {
				continue
			}
			g := &out.GPUs[i]
			if s.Whole() {
				// The pod holds the GPU whole: it is whole from now on (mig.ApplyWhole's
				// rule), or unusable when it cannot be had whole.
				if g.WholeUse() == mig.UseNo {
					g.Usable = false
				}
				g.Mode, g.InUse = mig.ModeWhole, true
				continue
			}
			prof, err := g.State.Model().Profile(s.Profile)
			if err == nil {
				var next mig.GPUState
				if next, err = g.State.Take(prof, s.Placement); err == nil {
					g.State = next
				}
			}
			if err != nil {
				g.Usable = false
			}
		}
	}
	return out
}
