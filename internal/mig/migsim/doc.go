// Package migsim is what slicer-sim and bench/packing use of internal/mig and the scheduler
// does not: two-move chains of defragmentation moves (PlanDefragChains). Like internal/mig it
// is pure: no I/O, no clock, deterministic, the standard library and internal/mig only.
package migsim
