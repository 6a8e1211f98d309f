// Command slicer-sim replays a MIG request trace through a placement policy of internal/mig
// (the same functions the scheduler plugin calls) and prints one JSON object of results as the
// last line of stdout.
//
//	slicer-sim [--policy slicer|first-fit|das-like] [--decisions FILE] [--elastic] TRACE.jsonl
//	slicer-sim --moves N [--repack-gpus K] [--max-evictions E --eviction-window W] [--restart R]
//	    [--time-unit U] [--all-movable] ... TRACE.jsonl
//	    (a request that fits nowhere may move up to N running slices, also by re-placing the
//	    slices of up to K GPUs, as the scheduler's Evict mode does: only pods a controller owns
//	    and not annotated slicer.dev/movable: "false", at most E evictions in any W (default the
//	    API's, 10 per hour; E -1: no cap), each moved pod gone for R; U is one unit of trace time)
//	slicer-sim --dra-order name-order|slicer-order [--seed N] ... TRACE.jsonl   (stock DRA allocator)
//	slicer-sim pack --model H100-80GB --requests 1g.10gb:3,3g.40gb:2 [--policy P]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/slicer-operator/slicer/cmd/slicer-sim/sim"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migsim"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "slicer-sim:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "pack" {
		return pack(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("slicer-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policy := fs.String("policy", "slicer", "placement policy: "+strings.Join(migsim.PolicyNames(), "|"))
	decisions := fs.String("decisions", "", "write one JSON line per arrival to this file")
	elastic := fs.Bool("elastic", false, "add nodes when a request fits nowhere (measures consolidation instead of loss)")
	draOrder := fs.String("dra-order", "", "replay through the stock scheduler's DRA allocator with devices published in this order ("+mig.NameOrder.Name()+"|"+mig.PreferredOrder.Name()+") instead of --policy")
	seed := fs.Uint64("seed", 1, "the stock scheduler's tie-break seed (--dra-order)")
	moves := fs.Int("moves", 0, "let a request that fits nowhere move up to this many running slices (defragmentation; 0: none)")
	repackGPUs := fs.Int("repack-gpus", 0, "with --moves, also allow repack plans that re-place the slices of up to this many GPUs (0: none; the scheduler: "+strconv.Itoa(mig.DefaultRepackGPUs)+")")
	maxEvictions := fs.Int("max-evictions", 0, "with --moves, the eviction cap per --eviction-window, cluster-wide (0: the API's default; -1: none)")
	window := fs.Duration("eviction-window", 0, "with --moves, the eviction cap's sliding window (0: the API's default)")
	restart := fs.Duration("restart", 0, "with --moves, how long a moved pod is gone before its replacement runs")
	unit := fs.Duration("time-unit", time.Hour, "how long one unit of the trace's time is")
	allMovable := fs.Bool("all-movable", false, "with --moves, let every running pod move (ignore the trace's controllers and annotations)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: slicer-sim [--policy P] [--decisions FILE] [--elastic] TRACE.jsonl | slicer-sim pack --model M --requests P:N[,P:N]")
	}
	pol, err := migsim.ParsePolicy(*policy)
	if err != nil {
		return err
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	tr, err := sim.ReadTrace(f)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if *moves < 0 || *moves > mig.MaxDefragMoves {
		return fmt.Errorf("--moves %d: want 0..%d", *moves, mig.MaxDefragMoves)
	}
	if *repackGPUs < 0 || (*repackGPUs > 0 && *moves == 0) {
		return fmt.Errorf("--repack-gpus %d: want 0, or a positive number with --moves", *repackGPUs)
	}
	if *unit <= 0 || *window < 0 || *restart < 0 || *maxEvictions < -1 {
		return fmt.Errorf("--time-unit must be positive, --eviction-window and --restart not negative, --max-evictions -1 or more")
	}
	opt := sim.Options{Policy: pol, Elastic: *elastic, Seed: *seed, DefragMoves: *moves, RepackGPUs: *repackGPUs,
		MaxEvictions: *maxEvictions, EvictionWindow: *window, RestartTime: *restart, TimeUnit: *unit, AllMovable: *allMovable}
	switch *draOrder {
	case "":
	case mig.NameOrder.Name():
		opt.Frontend, opt.Order = sim.StockDRA, mig.NameOrder
	case mig.PreferredOrder.Name():
		opt.Frontend, opt.Order = sim.StockDRA, mig.PreferredOrder
	default:
		return fmt.Errorf("--dra-order %q: want %s or %s", *draOrder, mig.NameOrder.Name(), mig.PreferredOrder.Name())
	}
	if *decisions != "" {
		df, err := os.Create(*decisions)
		if err != nil {
			return err
		}
		defer df.Close()
		opt.Decisions = df
	}
	res, err := sim.Run(tr, opt)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// PackResult is slicer-sim pack's output.
type PackResult struct {
	Model      string            `json:"model"`
	Requests   []mig.RequestItem `json:"requests"`
	Policy     string            `json:"policy"`
	GPUs       int               `json:"gpus"`
	LowerBound int               `json:"lowerBound"`
	Optimum    int               `json:"optimum"`
}

func pack(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("slicer-sim pack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "H100-80GB", "GPU model")
	requests := fs.String("requests", "", "profile:count,... e.g. 1g.10gb:3,3g.40gb:2")
	policy := fs.String("policy", "slicer", "placement policy: "+strings.Join(migsim.PolicyNames(), "|"))
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := mig.ParseModel(*model)
	if err != nil {
		return err
	}
	pol, err := migsim.ParsePolicy(*policy)
	if err != nil {
		return err
	}
	items, err := parseItems(*requests)
	if err != nil {
		return err
	}
	used, err := migsim.PackStatic(pol, m, items)
	if err != nil {
		return err
	}
	lb, err := mig.LowerBound(m, items)
	if err != nil {
		return err
	}
	opt, err := mig.Optimum(m, items)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(PackResult{Model: m.String(), Requests: items, Policy: pol.Name(), GPUs: used, LowerBound: lb, Optimum: opt})
}

func parseItems(s string) ([]mig.RequestItem, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--requests is required (e.g. 1g.10gb:3,3g.40gb:2)")
	}
	var items []mig.RequestItem
	for _, part := range strings.Split(s, ",") {
		name, count, ok := strings.Cut(strings.TrimSpace(part), ":")
		n := 1
		if ok {
			var err error
			if n, err = strconv.Atoi(count); err != nil || n < 0 {
				return nil, fmt.Errorf("bad count in %q", part)
			}
		}
		items = append(items, mig.RequestItem{Profile: name, Count: n})
	}
	return items, nil
}
