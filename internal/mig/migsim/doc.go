// Package migsim is what slicer-sim and bench/packing use beside internal/mig and the
// scheduler does not: the Policy interface with the Slicer policy (mig.Score and mig.Place) and
// two baselines, FirstFit and DASLike; SelectNode, the simulator's stand-in for kube-scheduler's
// host selection; PackStatic and StaticOrder for static batches; and two-move chains of
// defragmentation moves (PlanDefragChains). Like internal/mig it is pure: no I/O, no clock,
// deterministic, the standard library and internal/mig only.
package migsim
