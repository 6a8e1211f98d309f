package mig

// Destination classes (DefragOptions.DestinationClass): the moved slices of one class may go to
// the same nodes, so the planner asks DefragOptions.Destinations once per class, each class's
// predicate once per node (classInfo.allowed), and counts a class's allowed GPUs where a
// profile fits now once per (class, profile) instead of once per slice. A slice's own destInfo
// (destOf) is read off its class's list, with the same count, list and order its own pass would
// give (docs/design/defragmentation.md, Destination classes).

// classInfo is one non-empty class: its predicate, asked of DefragOptions.Destinations for the
// first slice of the class, and its allowed GPUs per (model, profile), see classFitsOf.
type classInfo struct {
	allow func(node int) bool
	// verdict, per node, what allow said (0: not asked, 1: no, 2: yes), so that it is asked
	// once per node and class, not once per profile.
	verdict []uint8
	fits    [numModels + 1][maxProfiles][]gpuRef
	built   [numModels + 1][maxProfiles]bool
}

// allowed is ci.allow(n), asked once.
func (ci *classInfo) allowed(n int) bool {
	if v := ci.verdict[n]; v != 0 {
		return v == 2
	}
	ok := ci.allow(n)
	ci.verdict[n] = 1 + uint8(b2i(ok))
	return ok
}

// maxDenseClass: class numbers below it are found in a slice, the others in a map.
const maxDenseClass = 1 << 12

// classOf is class's info (a class of its own, 0 or less, has none: nil), from one of its
// slices.
func (r *defragRun) classOf(class int, from SliceAt) *classInfo {
	if class <= 0 {
		return nil
	}
	if class < len(r.classes) {
		if ci := r.classes[class]; ci != nil {
			return ci
		}
	} else if ci, ok := r.classMap[class]; ok {
		return ci
	}
	ci := newClassInfo()
	ci.allow, ci.verdict = r.dest(from), verdictPool.get(len(r.nodes))
	switch {
	case class < len(r.classes):
		r.classes[class] = ci
	case class < maxDenseClass:
		r.classes = append(r.classes, make([]*classInfo, class+1-len(r.classes))...)
		r.classes[class] = ci
	default:
		if r.classMap == nil {
			r.classMap = map[int]*classInfo{}
		}
		r.classMap[class] = ci
	}
	return ci
}

// classFitsOf lists the usable GPUs of model m where profile q fits now on nodes the class's
// predicate accepts, in node then GPU order, up to r.maxMoves+1 of them (the most destOf needs:
// one may be the slice's own GPU).
func (r *defragRun) classFitsOf(ci *classInfo, m Model, q int) []gpuRef {
	if ci.built[m][q] {
		return ci.fits[m][q]
	}
	ci.built[m][q] = true
	var out []gpuRef
	last, lastOK := int32(-1), false
	for _, ref := range r.gpusFitting(m, q) {
		if ref.node != last {
			last, lastOK = ref.node, ci.allowed(int(ref.node))
		}
		if !lastOK {
			continue
		}
		out = append(out, ref)
		if len(out) > r.maxMoves {
			break
		}
	}
	ci.fits[m][q] = out
	return out
}
