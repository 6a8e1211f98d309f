package engine

import (
	"slices"
	"sort"
	"time"
)

// OrphanClock is when each orphan, by key, was first seen as one: a MIG instance (Slice.Key)
// that nothing Slicer tracks holds (no allocation in the device-plugin frontend, no allocated
// claim in the DRA frontend), or, in the DRA frontend, a claim's CDI spec. Both frontends
// destroy an orphan only once it has been one for their grace period, and never on the pass
// that first finds it: a holder made a moment ago may not be visible yet. An orphan that
// stops being one and comes back starts again. The zero value is not usable: make it.
type OrphanClock map[string]time.Time

// Due reports whether key, an orphan on this pass, has been one for grace, as of the passes
// before this one (one first seen now is not due).
func (c OrphanClock) Due(key string, now time.Time, grace time.Duration) bool {
	since, seen := c[key]
	return seen && now.Sub(since) >= grace
}

// Track records this pass's orphans: each key seen for the first time starts its clock now,
// and keys that are no orphans any more are forgotten.
func (c OrphanClock) Track(keys []string, now time.Time) {
	for k := range c {
		if !slices.Contains(keys, k) {
			delete(c, k)
		}
	}
	for _, k := range keys {
		if _, ok := c[k]; !ok {
			c[k] = now
		}
	}
}

// Pass is one sweep: it returns the keys among this pass's orphans that are Due, sorted, and
// then Tracks them all.
func (c OrphanClock) Pass(keys []string, now time.Time, grace time.Duration) []string {
	var out []string
	for _, k := range keys {
		if c.Due(k, now, grace) {
			out = append(out, k)
		}
	}
	c.Track(keys, now)
	sort.Strings(out)
	return out
}

// Forget drops key (its orphan was destroyed).
func (c OrphanClock) Forget(key string) { delete(c, key) }

// Next is how long until the first orphan's grace ends, at most ceiling and at least 100 ms:
// when to look again.
func (c OrphanClock) Next(now time.Time, grace, ceiling time.Duration) time.Duration {
	next := ceiling
	for _, since := range c {
		if d := since.Add(grace).Sub(now); d < next {
			next = max(d, 100*time.Millisecond)
		}
	}
	return next
}
