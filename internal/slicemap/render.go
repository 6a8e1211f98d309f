package slicemap

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes m as indented JSON (the stable form for scripts).
func WriteJSON(w io.Writer, m Map) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return fmt.Errorf("encode slice map: %w", err)
	}
	return nil
}

// WriteText writes m for people:
//
//	NODE gpu-1  driver Ready 550.54.15
//	  GPU 0  H100-80GB  GPU-8f3a2c1d  MIG Enabled  Healthy  [a a a a|b|.|.|.]  3/8 free
//	    KEY  PLACEMENT  PROFILE  STATE      MIG DEVICE    GI  CI  ALLOCATION  POD
//	    a    0+4        3g.40gb  Allocated  MIG-1a2b3c4d  1   0   team-a/a1   team-a/p1 (Running)
//	  not realized:
//	    ...
//	PENDING PODS
//	  ...
func WriteText(w io.Writer, m Map) error {
	ew := &errWriter{w: w}
	if len(m.Nodes) == 0 {
		ew.printf("no NodeAccelerators\n")
	}
	for i := range m.Nodes {
		if i > 0 {
			ew.printf("\n")
		}
		writeNode(ew, &m.Nodes[i])
	}
	ew.printf("\n")
	writePending(ew, m.PendingPods)
	return ew.err
}

func writeNode(ew *errWriter, n *Node) {
	switch {
	case n.NoAccelerator:
		ew.printf("NODE %s  (no NodeAccelerator)\n", n.Name)
	default:
		ew.printf("NODE %s  driver %s\n", n.Name, joinNonEmpty(dash(n.Driver), n.DriverVersion))
	}
	if len(n.GPUs) == 0 && !n.NoAccelerator {
		ew.printf("  no GPUs reported\n")
	}
	for i := range n.GPUs {
		writeGPU(ew, &n.GPUs[i])
	}
	if len(n.Unrealized) == 0 {
		return
	}
	ew.printf("  not realized:\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    ALLOCATION\tGPU\tPROFILE\tPLACEMENT\tSTATE\tPOD\tREASON")
	for _, a := range n.Unrealized {
		gpu := strconv.Itoa(int(a.GPUIndex))
		if a.GPUIndex < 0 {
			gpu = shortUUID(a.GPUUUID) + " (not on node)"
		}
		fmt.Fprintf(tw, "    %s/%s\t%s\t%s\t%d+%d\t%s\t%s\t%s\n", a.Namespace, a.Name, gpu, dash(a.Profile),
			a.Start, a.Size, dash(a.State), podText(a.Pod), reasonText(a.Reason, a.Message))
	}
	if err := tw.Flush(); err != nil && ew.err == nil {
		ew.err = err
	}
}

func writeGPU(ew *errWriter, g *GPU) {
	occupancy := "(no geometry: unknown model)"
	if g.MemorySlices > 0 {
		free := 0
		for _, c := range g.Columns {
			if c == "" {
				free++
			}
		}
		occupancy = fmt.Sprintf("%s  %d/%d free", g.Bar, free, g.MemorySlices)
	}
	ew.printf("  GPU %d  %s  %s  MIG %s  %s  %s\n", g.Index, dash(g.Model), g.UUID, dash(g.MIGMode), dash(g.Health), occupancy)
	for _, p := range g.Problems {
		ew.printf("    ! %s\n", p)
	}
	if len(g.Slices) == 0 {
		return
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    KEY\tPLACEMENT\tPROFILE\tSTATE\tMIG DEVICE\tGI\tCI\tALLOCATION\tPOD")
	for _, s := range g.Slices {
		alloc, pod := "-", "-"
		if a := s.Allocation; a != nil {
			alloc = a.Namespace + "/" + a.Name
			switch {
			case a.Missing:
				alloc += " (not found)"
			case a.State != "":
				alloc += " (" + a.State + ")"
			}
			pod = podText(a.Pod)
		}
		fmt.Fprintf(tw, "    %s\t%d+%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.Key, s.Start, s.Size, s.Profile, dash(s.State),
			dash(shortUUID(s.MIGDeviceUUID)), s.GPUInstanceID, s.ComputeInstanceID, alloc, pod)
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
			name := r.Profile
			if name == "" {
				name = r.Resource
			}
			reqs = append(reqs, fmt.Sprintf("%s x%d", name, r.Count))
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
}

func podText(p *Pod) string {
	if p == nil {
		return "-"
	}
	s := p.Namespace + "/" + p.Name
	if p.Missing {
		return s + " (not found)"
	}
	detail := dash(p.Phase)
	if p.Terminating {
		detail += ", terminating"
	}
	if p.UIDMismatch {
		detail += ", other UID: allocation is stale"
	}
	return s + " (" + detail + ")"
}

// shortUUID keeps the prefix and the first 8 hex digits: "MIG-8f3a2c1d" (GPU lines show the
// whole UUID: emulated and some real GPUs share their first digits).
func shortUUID(u string) string {
	if i := strings.IndexByte(u, '-'); i >= 0 && len(u) > i+9 {
		return u[:i+9]
	}
	return u
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// reasonText is "Reason: message" on one line, "-" when both are empty.
func reasonText(reason, message string) string {
	message = oneLine(message)
	switch {
	case reason == "" && message == "":
		return "-"
	case reason == "":
		return message
	case message == "":
		return reason
	default:
		return reason + ": " + message
	}
}

// joinNonEmpty joins the non-empty parts with a space.
func joinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}

// oneLine folds a multi-line message (scheduler messages can hold newlines) onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// errWriter keeps the first write error so rendering code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = fmt.Errorf("write slice map: %w", err)
	}
	return n, e.err
}

func (e *errWriter) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(e, format, args...)
}
