package plugin

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// nomination is the placement preemption cleared for a pod on a node: AddPod gives it to the
// nominated pod while its victims terminate, Reserve prefers it for the pod itself and keeps
// pods of lower priority off it. Memory only: after a restart a nominated pod is placed where
// the policy would place it (placeAdded).
type nomination struct {
	node  string
	slots []snapshot.Slot
}

// nominatedSlots returns the placement cleared for the pod on the node, or nil.
func (p *Plugin) nominatedSlots(uid types.UID, node string) []snapshot.Slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.nominations[uid]
	if !ok || n.node != node {
		return nil
	}
	return slices.Clone(n.slots)
}

// setNomination records the placement cleared for the pod (nil slots forget it).
func (p *Plugin) setNomination(uid types.UID, node string, slots []snapshot.Slot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nominations == nil {
		p.nominations = map[types.UID]nomination{}
	}
	if slots == nil {
		delete(p.nominations, uid)
		return
	}
	p.nominations[uid] = nomination{node: node, slots: slots}
}
