package mig

// Destination classes (DefragOptions.DestinationClass): the moved slices of one class may go to
// the same nodes, so the planner asks DefragOptions.Destinations once per class and counts a
// class's allowed GPUs where a profile fits now once per (class, profile) instead of once per
// slice. On a crowded cluster most slices the search looks at have few allowed GPUs or none,
// and counting them means asking the predicate about every node with room for the slice's
// profile; per slice that is the planner's main cost (docs/design/defragmentation.md). A
// slice's own destInfo (destOf) is then read off its class's list, which gives it the same
// others, list and order as its own count would, so no answer changes.

type classKey struct {
	class string
	model Model
	prof  int
}

// allowOf is the predicate of from's class ("": from's own, asked of r.dest each time).
func (r *defragRun) allowOf(class string, from SliceAt) func(int) bool {
	if class == "" {
		return r.dest(from)
	}
	if allow, ok := r.classAllow[class]; ok {
		return allow
	}
	if r.classAllow == nil {
		r.classAllow = map[string]func(int) bool{}
	}
	allow := r.dest(from)
	r.classAllow[class] = allow
	return allow
}

// classFitsOf lists the usable GPUs of model m where profile q fits now on nodes allow accepts,
// in node then GPU order, up to r.maxMoves+1 of them (the most destOf needs: one may be the
// slice's own GPU).
func (r *defragRun) classFitsOf(class string, m Model, q int, allow func(int) bool) []gpuRef {
	key := classKey{class, m, q}
	if refs, ok := r.classFits[key]; ok {
		return refs
	}
	if r.classFits == nil {
		r.classFits = map[classKey][]gpuRef{}
	}
	var out []gpuRef
	last, lastOK := int32(-1), false
	for _, ref := range r.fits(m, q) {
		if ref.node != last {
			last, lastOK = ref.node, allow(int(ref.node))
		}
		if !lastOK {
			continue
		}
		out = append(out, ref)
		if len(out) > r.maxMoves {
			break
		}
	}
	r.classFits[key] = out
	return out
}
