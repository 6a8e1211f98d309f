package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slicer-operator/slicer/internal/rightsize"
)

func rightSize(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("slicer right-size", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prom := fs.String("prometheus", "", "base URL of the Prometheus HTTP API holding Slicer's and DCGM exporter's series (required), e.g. http://prometheus:9090")
	window := fs.Duration("window", 6*time.Hour, "peak framebuffer use over this window; only slices their pod held as long")
	output := fs.String("o", "text", "output format: text|json")
	timeout := fs.Duration("timeout", 30*time.Second, "give up querying Prometheus after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	switch {
	case fs.NArg() != 0:
		fmt.Fprintf(stderr, "slicer right-size: unexpected arguments %q\n", fs.Args())
		return ExitUsage
	case *prom == "":
		fmt.Fprintln(stderr, "slicer right-size: --prometheus URL is required")
		return ExitUsage
	case *window < time.Second:
		fmt.Fprintf(stderr, "slicer right-size: --window must be at least 1s, not %s\n", *window)
		return ExitUsage
	case *output != "text" && *output != "json":
		fmt.Fprintf(stderr, "slicer right-size: -o must be text or json, not %q\n", *output)
		return ExitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	hints, err := rightsize.Query(ctx, http.DefaultClient, strings.TrimSuffix(*prom, "/"), *window)
	if err != nil {
		fmt.Fprintln(stderr, "slicer right-size:", err)
		return ExitError
	}
	if *output == "json" {
		err = writeHintsJSON(stdout, hints)
	} else {
		err = writeHintsText(stdout, hints, *window)
	}
	if err != nil {
		fmt.Fprintln(stderr, "slicer right-size:", err)
		return ExitError
	}
	return ExitOK
}

func gb(b float64) string { return fmt.Sprintf("%.1f GB", b/1e9) }

func writeHintsText(w io.Writer, hints []rightsize.Hint, window time.Duration) error {
	if len(hints) == 0 {
		_, err := fmt.Fprintf(w, "No pod's peak framebuffer use over %s fits a smaller profile.\n", window)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NAMESPACE\tPOD\tNODE\tGPU\tPLACEMENT\tPROFILE\tPEAK (%s)\tNEXT SMALLER\tSMALLEST THAT FITS\n", window)
	for _, h := range hints {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s (%s)\t%s (%s)\n", h.Namespace, h.Pod, h.Node, h.GPU, h.Placement, h.Profile,
			gb(h.PeakBytes), h.Next, gb(h.NextBytes), h.Smallest, gb(h.SmallestBytes))
	}
	return tw.Flush()
}

type hintJSON struct {
	Namespace     string  `json:"namespace"`
	Pod           string  `json:"pod"`
	Node          string  `json:"node"`
	GPU           string  `json:"gpu"`
	Placement     string  `json:"placement"`
	Profile       string  `json:"profile"`
	PeakBytes     float64 `json:"peakBytes"`
	Next          string  `json:"nextSmallerProfile"`
	NextBytes     float64 `json:"nextSmallerBytes"`
	Smallest      string  `json:"smallestFittingProfile"`
	SmallestBytes float64 `json:"smallestFittingBytes"`
}

func writeHintsJSON(w io.Writer, hints []rightsize.Hint) error {
	out := make([]hintJSON, 0, len(hints))
	for _, h := range hints {
		out = append(out, hintJSON{Namespace: h.Namespace, Pod: h.Pod, Node: h.Node, GPU: h.GPU, Placement: h.Placement, Profile: h.Profile,
			PeakBytes: h.PeakBytes, Next: h.Next, NextBytes: h.NextBytes, Smallest: h.Smallest, SmallestBytes: h.SmallestBytes})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
