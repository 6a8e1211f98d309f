package slicemap

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
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
		ew.printf("NODE %s  (no NodeAccelerator)%s\n", n.Name, upgradeText(n.DriverUpgrade))
	default:
		ew.printf("NODE %s  driver %s%s\n", n.Name, joinNonEmpty(dash(n.Driver), n.DriverVersion), upgradeText(n.DriverUpgrade))
	}
	if len(n.GPUs) == 0 && !n.NoAccelerator {
		ew.printf("  no GPUs reported\n")
	}
	for i := range n.GPUs {
		writeGPU(ew, &n.GPUs[i])
	}
	writeUnprepared(ew, n.Unprepared, n.NoAccelerator)
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
		profile, placement := dash(a.Profile), fmt.Sprintf("%d+%d", a.Start, a.Size)
		if a.WholeGPU {
			profile, placement = "whole GPU", "-"
		}
		fmt.Fprintf(tw, "    %s/%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Namespace, a.Name, gpu, profile,
			placement, dash(a.State), podText(a.Pod, "allocation"), reasonText(a.Reason, a.Message))
	}
	if err := tw.Flush(); err != nil && ew.err == nil {
		ew.err = err
	}
}

func writeGPU(ew *errWriter, g *GPU) {
	occupancy := "(no geometry: unknown model)"
	switch {
	case len(g.Whole) > 0 || len(g.WholeClaims) > 0:
		occupancy = "held whole" // MIG mode off: its memory slices mean nothing now
	case g.Mode == string(slicerv1alpha1.GPUModeWhole):
		occupancy = "free whole"
	case g.MemorySlices > 0:
		free := 0
		for _, c := range g.Columns {
			if c == "" {
				free++
			}
		}
		occupancy = fmt.Sprintf("%s  %d/%d free", g.Bar, free, g.MemorySlices)
	}
	mode := ""
	if g.Mode != "" {
		mode = "  mode " + g.Mode
	}
	ew.printf("  GPU %d  %s  %s  MIG %s%s  %s  %s\n", g.Index, dash(g.Model), g.UUID, dash(g.MIGMode), mode, dash(g.Health), occupancy)
	for _, p := range g.Problems {
		ew.printf("    ! %s\n", p)
	}
	for _, a := range g.Whole {
		ew.printf("    whole GPU: %s/%s  %s  %s  %s\n", a.Namespace, a.Name, dash(a.State), podText(a.Pod, "allocation"), reasonText(a.Reason, a.Message))
	}
	for _, c := range g.WholeClaims {
		ew.printf("    whole GPU: claim %s/%s  %s\n", c.Namespace, c.Name, podsText(c.Pods))
	}
	if len(g.Slices) == 0 {
		return
	}
	claims := false
	for _, s := range g.Slices {
		claims = claims || s.Claim != nil
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	if claims {
		// DRA mode: one column, "claim ns/name → pod ns/name (phase)".
		fmt.Fprintln(tw, "    KEY\tPLACEMENT\tPROFILE\tSTATE\tMIG DEVICE\tGI\tCI\tHELD BY")
	} else {
		fmt.Fprintln(tw, "    KEY\tPLACEMENT\tPROFILE\tSTATE\tMIG DEVICE\tGI\tCI\tALLOCATION\tPOD")
	}
	for _, s := range g.Slices {
		fmt.Fprintf(tw, "    %s\t%d+%d\t%s\t%s\t%s\t%d\t%d\t%s\n", s.Key, s.Start, s.Size, s.Profile, dash(s.State),
			dash(shortUUID(s.MIGDeviceUUID)), s.GPUInstanceID, s.ComputeInstanceID, heldBy(s, claims))
	}
	if err := tw.Flush(); err != nil && ew.err == nil {
		ew.err = err
	}
}

// heldBy is the text of what holds a slice: "ALLOCATION\tPOD" cells, or with oneColumn
// "claim ns/name → pod ns/name (phase)" (or "allocation ... → pod ...").
func heldBy(s Slice, oneColumn bool) string {
	switch {
	case s.Claim != nil:
		return claimText(s.Claim)
	case s.Allocation == nil && oneColumn:
		return "-"
	case s.Allocation == nil:
		return "-\t-"
	}
	a := s.Allocation
	alloc := a.Namespace + "/" + a.Name
	switch {
	case a.Missing:
		alloc += " (not found)"
	case a.State != "":
		alloc += " (" + a.State + ")"
	}
	if oneColumn {
		if a.Pod == nil {
			return "allocation " + alloc
		}
		return "allocation " + alloc + " → pod " + podText(a.Pod, "allocation")
	}
	return alloc + "\t" + podText(a.Pod, "allocation")
}

// claimText is "claim ns/name → pod ns/name (phase)", with the claim's state when it is not
// simply allocated.
func claimText(c *Claim) string {
	s := "claim " + c.Namespace + "/" + c.Name
	switch {
	case c.Missing:
		return s + " (not found)"
	case c.UIDMismatch:
		return s + " (other UID: the slice is stale)"
	case !c.Allocated:
		s += " (not allocated this device)"
	}
	return s + " → " + podsText(c.Pods)
}

// podsText is "pod ns/name (phase)", "pods a (phase), b (phase)" or "no pod".
func podsText(pods []Pod) string {
	switch len(pods) {
	case 0:
		return "no pod"
	case 1:
		return "pod " + podText(&pods[0], "claim")
	}
	texts := make([]string, len(pods))
	for i := range pods {
		texts[i] = podText(&pods[i], "claim")
	}
	return "pods " + strings.Join(texts, ", ")
}

// podText is "ns/name (phase)"; holder names what goes stale when the pod has another UID.
func podText(p *Pod, holder string) string {
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
		detail += ", other UID: " + holder + " is stale"
	} else if p.Phase == string(corev1.PodSucceeded) || p.Phase == string(corev1.PodFailed) {
		// A finished pod uses no device: its slice goes to the next pod (the agent deletes
		// its allocations, Kubernetes deallocates its claims), so seeing one is transient.
		detail += ", finished: " + holder + " is being released"
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
