package main

import (
	"fmt"
	"sort"
	"time"
)

// spread is the median and range of one figure over the rounds of -repeat.
type spread struct {
	median, lo, hi float64
	n              int
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{median: med, lo: s[0], hi: s[len(s)-1], n: len(s)}
}

// text prints the median, the range and (when the median is not 0) the half-range relative to it.
func (s spread) text(format string) string {
	out := fmt.Sprintf(format+" ["+format+" – "+format+"]", s.median, s.lo, s.hi)
	if s.median != 0 {
		out += fmt.Sprintf(" ±%.0f%%", 50*(s.hi-s.lo)/s.median)
	}
	return out
}

// printRepeated prints, over the rounds of -repeat, each ratio against plain (computed within
// each round, whose phases ran back to back) and each phase's CPU per pod.
func printRepeated(p params, order []string, rounds []map[string]result) {
	if len(rounds) < 2 {
		return
	}
	fmt.Printf("\nOver %d interleaved rounds (median [min – max] ±half-range/median):\n", len(rounds))
	for _, k := range []string{"mig-sched", "mig-e2e", "dra-sched"} {
		var ratios []float64
		for _, r := range rounds {
			plain, okPlain := r["plain"]
			m, ok := r[k]
			if ok && okPlain {
				ratios = append(ratios, m.podsPerSec(p.pods)/plain.podsPerSec(p.pods))
			}
		}
		if len(ratios) > 0 {
			fmt.Printf("  ratio %-9s / plain (pods/s)     %s\n", k, spreadOf(ratios).text("%.3f"))
		}
	}
	perPod := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(max(p.pods, 1)) }
	fmt.Println("  CPU ms per measured pod:")
	for _, k := range order {
		var api, sched, etcd []float64
		for _, r := range rounds {
			if res, ok := r[k]; ok {
				api = append(api, perPod(res.cpu.apiserver))
				etcd = append(etcd, perPod(res.cpu.etcd))
				sched = append(sched, perPod(res.cpu.scheduler))
			}
		}
		fmt.Printf("    %-10s apiserver %s   scheduler %s   etcd %s\n", k,
			spreadOf(api).text("%.2f"), spreadOf(sched).text("%.2f"), spreadOf(etcd).text("%.2f"))
	}
	for _, k := range []string{"mig-sched", "mig-e2e", "dra-sched"} {
		var api, sched []float64
		for _, r := range rounds {
			plain, okPlain := r["plain"]
			m, ok := r[k]
			if ok && okPlain && plain.cpu.apiserver > 0 && plain.cpu.scheduler > 0 {
				api = append(api, float64(m.cpu.apiserver)/float64(plain.cpu.apiserver))
				sched = append(sched, float64(m.cpu.scheduler)/float64(plain.cpu.scheduler))
			}
		}
		if len(api) > 0 {
			fmt.Printf("  CPU per pod %-9s / plain: apiserver %s   scheduler %s\n", k, spreadOf(api).text("%.2f"), spreadOf(sched).text("%.2f"))
		}
	}
}
