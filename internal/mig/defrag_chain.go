package mig

import "math/bits"

// Two-move chains (DefragOptions.Chains): a movable slice b on a GPU X other than the target
// moves first to a place free now on a GPU other than the target; then the target's movable
// slice a moves into the room b left on X; then the request fits on the target. Unlike the
// plans of PlanDefrag's main search, a chain must be carried out in order (a's destination is
// free only once b's slice is gone), so it cannot be held before anything is evicted; the
// scheduler does not ask for chains. Not with DefragOptions.Destinations.

// chainHost is one way to make room for a profile q on a GPU where it does not fit now: move
// its movable slot b away, put q at slot d.
type chainHost struct {
	ref    gpuRef
	b, d   int
	after  uint16 // the GPU's state without b and with q at d
	selfE  int    // a slot for b's profile on the same GPU, free now and legal after: -1 if none
	fitsQb bool   // b's profile fits on this GPU now (so it is no "other" GPU for b)
}

// chainHosts lists, for model m and profile q, the usable GPUs where q does not fit now and
// one movable slice's removal lets it, where that slice has somewhere to go (its own GPU, or
// another GPU where its profile fits now), in node then GPU order; built once per call.
//
// A host serves every target but the GPUs of its fail set: its own GPU, and when its slice
// has no room on its own GPU and its profile fits now on one other GPU only, that GPU. The
// list keeps a host only when it serves a target that no host before it serves (the targets
// all earlier hosts fail, at most two), and ends when every target is served: for each
// target, the first host in node then GPU order that serves it is kept, which is all chain()
// asks. GPUs whose every possible host fails all those targets are passed over without asking
// which of their slices may move. So chain() costs O(GPUs) however many targets it tries.
func (r *defragRun) chainHosts(m Model, q int) []chainHost {
	if r.hosts == nil {
		r.hosts = map[[2]int][]chainHost{}
	}
	key := [2]int{int(m), q}
	if h, ok := r.hosts[key]; ok {
		return h
	}
	t, dt := tableFor(m), defragTableFor(m)
	np := t.nprof()
	var out []chainHost
	// The targets every host so far fails (all of them before the first host).
	var unserved [2]gpuRef
	nun, seen := 0, false
	fail := func(h *chainHost) (f [2]gpuRef, nf int) {
		f[0], nf = h.ref, 1
		if qb := int(t.slots[h.b].prof); h.selfE < 0 && r.fitCount[m][qb]-b2i(h.fitsQb) == 1 {
			for _, z := range r.gpusFitting(m, qb) {
				if z != h.ref {
					f[1], nf = z, 2
				}
			}
		}
		return f, nf
	}
	// useful: h serves a target no host before it serves.
	useful := func(h *chainHost) bool {
		if !seen {
			return true
		}
		f, nf := fail(h)
		for _, u := range unserved[:nun] {
			if u != f[0] && (nf < 2 || u != f[1]) {
				return true
			}
		}
		return false
	}
	var tmpl [][]chainHost // per state: its possible hosts, movability aside
scan:
	for x := range r.requestGPUs() {
		if x.m != m {
			continue
		}
		n, g, st := x.n, x.g, x.st
		if dt.minRemovals[st*np+q] != 1 {
			continue
		}
		if tmpl == nil {
			tmpl = make([][]chainHost, len(t.states))
		}
		if tmpl[st] == nil {
			tmpl[st] = r.hostsOf(t, st, q)
		}
		ref := gpuRef{int32(n), int32(g)}
		maybe := false
		for i := range tmpl[st] {
			h := tmpl[st][i]
			h.ref = ref
			if useful(&h) {
				maybe = true
				break
			}
		}
		if !maybe {
			continue
		}
		mov := r.movableSlots(&x) & movSlots
		for i := range tmpl[st] {
			h := tmpl[st][i]
			h.ref = ref
			if mov&(1<<h.b) == 0 || !useful(&h) {
				continue
			}
			out = append(out, h)
			f, nf := fail(&h)
			if !seen {
				seen, unserved, nun = true, f, nf
				continue
			}
			kept := 0
			for _, u := range unserved[:nun] {
				if u == f[0] || (nf == 2 && u == f[1]) {
					unserved[kept] = u
					kept++
				}
			}
			if nun = kept; nun == 0 {
				break scan
			}
		}
	}
	r.hosts[key] = out
	return out
}

// hostsOf lists the hosts for profile q a GPU in state st would have were all its slices
// movable (ref unset), in slot then start order; a non-nil empty slice when none.
func (r *defragRun) hostsOf(t *modelTable, st, q int) []chainHost {
	ns := t.nslots()
	m := t.profiles[q].Model
	out := []chainHost{}
	for rest := t.states[st]; rest != 0; rest &= rest - 1 {
		b := bits.TrailingZeros32(rest)
		cur := int(t.release[st*ns+b])
		qb := int(t.slots[b].prof)
		for _, start := range t.profiles[q].Starts {
			d := int(t.slotOf[q][start])
			next := t.take[cur*ns+d]
			if next == noState {
				continue
			}
			h := chainHost{b: b, d: d, after: uint16(next), selfE: -1, fitsQb: t.fits(st, qb)}
			for _, e := range t.profiles[qb].Starts {
				es := int(t.slotOf[qb][e])
				if t.slots[es].mem&t.used[st] == 0 && t.take[int(next)*ns+es] != noState {
					h.selfE = es
					break
				}
			}
			if h.selfE < 0 && r.fitCount[m][qb]-b2i(h.fitsQb) < 1 {
				continue // b has nowhere to go for any target
			}
			out = append(out, h)
		}
	}
	return out
}

// chain finds the first two-move chain in node then GPU order of the target: its first movable
// slot a whose removal opens the request, the first host of a's profile on another GPU whose
// moved slice has somewhere to go (its own GPU first, else the untouched GPU of best fit).
func (r *defragRun) chain() (DefragPlan, bool) {
	for u := range r.requestGPUs() {
		n, g, m, st, p := u.n, u.g, u.m, u.st, u.p
		t, dt := u.t, u.dt
		ns, np := t.nslots(), t.nprof()
		if dt.minRemovals[st*np+p] != 1 {
			continue
		}
		mov := r.movableSlots(&u)
		if mov&movHopeless != 0 {
			continue
		}
		target := gpuRef{int32(n), int32(g)}
		for rest := mov & movSlots; rest != 0; rest &= rest - 1 {
			a := bits.TrailingZeros32(rest)
			cur := int(t.release[st*ns+a])
			ps := int(t.best[cur*np+p])
			if ps == noSlot {
				continue
			}
			qa := int(t.slots[a].prof)
			for _, h := range r.chainHosts(m, qa) {
				if h.ref == target {
					continue
				}
				qb := int(t.slots[h.b].prof)
				var to SliceAt
				switch {
				case h.selfE >= 0:
					to = r.sliceOf(h.ref, t, h.selfE)
				case r.fitCount[m][qb]-b2i(t.fits(st, qb))-b2i(h.fitsQb) >= 1:
					r.nover = 2
					r.overlay[0].ref, r.overlay[1].ref = target, h.ref
					to = r.bestUntouched(m, qb, nil)
				default:
					continue
				}
				plan := DefragPlan{Ordered: true, Moves: []Move{
					{From: r.sliceOf(h.ref, t, h.b), To: to},
					{From: r.sliceOf(target, t, a), To: r.sliceOf(h.ref, t, h.d)},
				}, Target: r.sliceOf(target, t, ps)}
				return plan, true
			}
		}
	}
	return DefragPlan{}, false
}

func (r *defragRun) sliceOf(ref gpuRef, t *modelTable, slot int) SliceAt {
	sl := t.slots[slot]
	return SliceAt{Node: int(ref.node), GPU: int(ref.gpu), Profile: t.profiles[sl.prof],
		Placement: Placement{Start: int(sl.start), Size: int(sl.size)}}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
