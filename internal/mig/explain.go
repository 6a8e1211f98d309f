package mig

import (
	"fmt"
	"strings"
)

// Explain says in words why the request does not fit on the node, for the scheduler's failure
// message: which GPUs exist and, per GPU, why the first slice that cannot be placed has no
// legal free start (count limit, media engines, compute, or no contiguous free block). It
// returns "" when the request fits. Off the hot path: it allocates.
func Explain(node Node, req *Request) string {
	if req == nil || req.n == 0 {
		return "empty request"
	}
	if len(node.GPUs) == 0 {
		return "node has no MIG GPU"
	}
	var out [MaxRequestSlices]Assignment
	// Replay the default policy to find the first slice that fails.
	for n := 1; n <= req.n; n++ {
		sub := *req
		sub.n = n
		if _, ok := plan(node, &sub, &out); ok {
			continue
		}
		var b strings.Builder
		name := req.names[n-1]
		if req.n > 1 {
			fmt.Fprintf(&b, "slice %d of %d (%s) does not fit", n, req.n, LegalProfileName(name))
			if n > 1 {
				b.WriteString(" after placing the larger ones")
			}
		} else {
			fmt.Fprintf(&b, "%s does not fit", LegalProfileName(name))
		}
		fmt.Fprintf(&b, " on any of %d GPUs:", len(node.GPUs))
		overlay := make([]GPUState, len(node.GPUs))
		for i, g := range node.GPUs {
			overlay[i] = g.State
		}
		for _, a := range out[:n-1] {
			overlay[a.GPU], _ = overlay[a.GPU].Take(a.Profile, a.Placement)
		}
		for i, g := range node.GPUs {
			fmt.Fprintf(&b, " gpu %d (%s): ", i, g.State.Model())
			switch {
			case !g.State.Valid():
				b.WriteString("unknown model")
			case !g.Usable:
				b.WriteString("not usable (unhealthy or not managed by Slicer)")
			case g.Mode == ModeSwitching:
				b.WriteString("MIG mode change pending")
			case g.Mode == ModeWhole:
				b.WriteString(wholeWhyNotSlices(g))
			default:
				p, ok := req.Profile(n-1, g.State.Model())
				if !ok {
					fmt.Fprintf(&b, "no %s profile on this model", LegalProfileName(name))
				} else {
					b.WriteString(overlay[i].WhyNot(p))
				}
			}
			if i < len(node.GPUs)-1 {
				b.WriteByte(';')
			}
		}
		return b.String()
	}
	return ""
}

// wholeWhyNotSlices says why a whole-mode GPU takes no slice (SliceUse is UseNo, or a switched
// one would not hold the slice either).
func wholeWhyNotSlices(g GPU) string {
	switch {
	case g.InUse:
		return "MIG off, in use as a whole GPU"
	case !g.Switchable:
		return "MIG off, not switchable"
	}
	return "MIG off; switched to MIG it would not hold the slice either"
}
