package slicemap

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

// maxVerdicts bounds the GPU lines of one explanation in the text form (JSON has them all).
const maxVerdicts = 16

// writeUnprepared writes the claims allocated a device on the node whose slice is not there.
// Without a NodeAccelerator nothing says whether the devices are prepared.
func writeUnprepared(ew *errWriter, claims []Claim, noAccelerator bool) {
	switch {
	case len(claims) == 0:
		return
	case noAccelerator:
		ew.printf("  allocated (no NodeAccelerator says whether prepared):\n")
	default:
		ew.printf("  allocated, not prepared:\n")
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    CLAIM\tGPU\tPROFILE\tPLACEMENT\tDEVICE\tPODS\tPROBLEM")
	for _, c := range claims {
		gpu, size := strconv.Itoa(int(c.GPUIndex)), strconv.Itoa(int(c.Size))
		if c.GPUIndex < 0 {
			gpu = "-"
		}
		if c.Size == 0 {
			size = "?"
		}
		fmt.Fprintf(tw, "    %s/%s\t%s\t%s\t%d+%s\t%s\t%s\t%s\n", c.Namespace, c.Name, gpu, dash(c.Profile), c.Start, size,
			c.Device, strings.TrimPrefix(strings.TrimPrefix(podsText(c.Pods), "pods "), "pod "), dash(c.Problem))
	}
	if err := tw.Flush(); err != nil && ew.err == nil {
		ew.err = err
	}
}

func writePending(ew *errWriter, pods []PendingPod) {
	if len(pods) == 0 {
		ew.printf("PENDING PODS: none\n")
		return
	}
	ew.printf("PENDING PODS\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  POD\tREQUESTS\tNODE\tREASON")
	for _, p := range pods {
		reqs := make([]string, 0, len(p.Requests))
		for _, r := range p.Requests {
			reqs = append(reqs, requestText(r))
		}
		node := dash(p.NodeName)
		if p.NodeName == "" && p.Nominated != "" {
			node = p.Nominated + " (nominated)"
		}
		reason := reasonText(p.Reason, p.Message)
		fmt.Fprintf(tw, "  %s/%s\t%s\t%s\t%s\n", p.Namespace, p.Name, strings.Join(reqs, ", "), node, reason)
	}
	if err := tw.Flush(); err != nil && ew.err == nil {
		ew.err = err
	}
	writeExplanations(ew, pods)
}

// requestText is "1g.10gb x2", "3g.40gb x1 (claim c)", "3g.40gb all (template t)".
func requestText(r ResourceRequest) string {
	name := r.Profile
	if name == "" {
		name = r.Resource
	}
	s := fmt.Sprintf("%s x%d", name, r.Count)
	if r.AllDevices {
		s = name + " all"
	}
	var from []string
	switch {
	case r.Claim != "":
		from = append(from, "claim "+r.Claim)
	case r.ClaimTemplate != "":
		from = append(from, "template "+r.ClaimTemplate)
	}
	if r.FirstAvailable {
		from = append(from, "one of firstAvailable")
	}
	if len(from) > 0 {
		s += " (" + strings.Join(from, ", ") + ")"
	}
	return s
}

// writeExplanations writes, under the pending pods, why each profile they ask for has no room
// on the GPUs of the map.
func writeExplanations(ew *errWriter, pods []PendingPod) {
	header := false
	for _, p := range pods {
		for k, e := range p.Explanations {
			if !header {
				ew.printf("\nWHY PENDING (Slicer's view of the GPUs above)\n")
				header = true
			}
			ew.printf("  %s/%s  %s: %s\n", p.Namespace, p.Name, e.Profile, explanationSummary(e))
			if k == 0 && p.Preemption != "" {
				ew.printf("    %s\n", p.Preemption)
			}
			if k == 0 && p.Defragmentation != "" {
				ew.printf("    defragmentation plan: %s\n", p.Defragmentation)
			}
			tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
			for i, v := range e.GPUs {
				if i == maxVerdicts {
					fmt.Fprintf(tw, "    ... and %d more GPUs (-o json lists them all)\n", len(e.GPUs)-maxVerdicts)
					break
				}
				what, why := "can take one", "at "+strings.Join(v.Placements, ", ")
				if v.Obstacle != "" {
					what, why = v.Obstacle, v.Reason
				}
				fmt.Fprintf(tw, "    %s GPU %d\t%s\t%s\n", v.Node, v.Index, what, why)
			}
			if err := tw.Flush(); err != nil && ew.err == nil {
				ew.err = err
			}
		}
	}
}

func explanationSummary(e Explanation) string {
	switch {
	case len(e.GPUs) == 0:
		return "no NodeAccelerator reports a GPU"
	case e.Fits == 0:
		return fmt.Sprintf("none of %d GPUs can take one now", len(e.GPUs))
	default:
		return fmt.Sprintf("%d of %d GPUs can take one now (the pod waits for something else: see its reason)", e.Fits, len(e.GPUs))
	}
}
