package snapshot

import "sort"

// Holders returns, for each GPU of a node, the pods (namespace/name) holding
// slices on it, sorted. Off the hot path (failure messages).
func (c *Cache) Holders(node string) map[string][]string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	sets := map[string]map[string]bool{}
	add := func(gpu, holder string) {
		if sets[gpu] == nil {
			sets[gpu] = map[string]bool{}
		}
		sets[gpu][holder] = true
	}
	for _, a := range c.nodeAllocs[node] {
		add(a.Slot.GPU, a.Namespace+"/"+a.PodName)
	}
	for _, r := range c.reservations {
		if r.NodeName == node {
			for _, s := range r.Slots {
				add(s.GPU, r.Namespace+"/"+r.PodName)
			}
		}
	}
	for _, u := range c.unseenOn(node) {
		add(u.slot.GPU, u.podName)
	}
	out := map[string][]string{}
	for gpu, set := range sets {
		for h := range set {
			out[gpu] = append(out[gpu], h)
		}
		sort.Strings(out[gpu])
	}
	return out
}
