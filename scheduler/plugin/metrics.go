package plugin

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Unreserve reasons (bounded label values).
const (
	UnreservePreBind = "prebind"
	UnreserveBind    = "bind"
	UnreserveDeleted = "deleted"
	UnreserveOther   = "other"
)

// Metrics are the plugin's Prometheus collectors.
type Metrics struct {
	// Reservations is the number of pods holding slices in memory, by state
	// (reserved: before PreBind; committed: allocations created, not yet bound).
	Reservations *prometheus.GaugeVec
	// Unreserve counts released reservations by reason.
	Unreserve *prometheus.CounterVec
	// AllocationConflicts counts double allocations seen in the snapshot (I1); must stay 0.
	AllocationConflicts prometheus.Counter
	// PreBindWait is how long PreBind waited for the agent to report the slices Ready.
	PreBindWait prometheus.Histogram
	// DefragPlans counts the defragmentation plans PostFilter looked for, by outcome
	// (mig.DefragOutcome: Planned, NoPlan, NoCapacity, FitsNow, Unsupported).
	DefragPlans *prometheus.CounterVec
	// DefragPlanDuration is how long one search for a plan took.
	DefragPlanDuration prometheus.Histogram
	// DefragEvictions counts the pods evicted to carry out plans (Evict mode).
	DefragEvictions prometheus.Counter
	// DefragRefused counts plans not carried out, or abandoned, by reason.
	DefragRefused *prometheus.CounterVec
}

// NewMetrics builds the collectors and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Reservations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_scheduler_reservations",
			Help: "Pods whose MIG slices the scheduler holds in memory, by state (reserved, committed).",
		}, []string{"state"}),
		Unreserve: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_scheduler_unreserve_total",
			Help: "Reservations released by Unreserve, by reason (prebind, bind, deleted, other).",
		}, []string{"reason"}),
		AllocationConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slicer_scheduler_allocation_conflicts_total",
			Help: "Double allocations (two pods on overlapping placements of one GPU) seen by the scheduler; must stay 0.",
		}),
		PreBindWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slicer_scheduler_prebind_wait_seconds",
			Help:    "Time PreBind waited for the node agent to report a pod's slices Ready.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		DefragPlans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_scheduler_defrag_plans_total",
			Help: "Defragmentation plans looked for a pod that fits nowhere, by outcome (Planned, NoPlan, NoCapacity, FitsNow, Unsupported).",
		}, []string{"outcome"}),
		DefragPlanDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slicer_scheduler_defrag_plan_duration_seconds",
			Help:    "Time one search for a defragmentation plan took.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	m.DefragEvictions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slicer_scheduler_defrag_evictions_total",
		Help: "Pods evicted through the Eviction API to carry out defragmentation plans (Evict mode).",
	})
	m.DefragRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slicer_scheduler_defrag_refused_total",
		Help: "Defragmentation plans not carried out or abandoned, by reason (evictionCap, roomTaken, notRecorded, evictionRefused, replacementTimeout).",
	}, []string{"reason"})
	for _, r := range []string{DefragRefusedEvictionCap, DefragRefusedRoomTaken, DefragRefusedEviction, DefragRefusedReplacementLate} {
		m.DefragRefused.WithLabelValues(r)
	}
	for _, o := range []mig.DefragOutcome{mig.DefragPlanned, mig.DefragNoPlan, mig.DefragNoCapacity, mig.DefragFitsNow, mig.DefragUnsupported} {
		m.DefragPlans.WithLabelValues(string(o))
	}
	for _, s := range []string{"reserved", "committed"} {
		m.Reservations.WithLabelValues(s)
	}
	for _, r := range []string{UnreservePreBind, UnreserveBind, UnreserveDeleted, UnreserveOther} {
		m.Unreserve.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range m.Collectors() {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register scheduler metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Collectors lists the collectors.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Reservations, m.Unreserve, m.AllocationConflicts, m.PreBindWait,
		m.DefragPlans, m.DefragPlanDuration, m.DefragEvictions, m.DefragRefused}
}

// ReservationsChanged implements snapshot.Events.
func (m *Metrics) ReservationsChanged(reserved, committed int) {
	m.Reservations.WithLabelValues("reserved").Set(float64(reserved))
	m.Reservations.WithLabelValues("committed").Set(float64(committed))
}

// Conflict implements snapshot.Events.
func (m *Metrics) Conflict() { m.AllocationConflicts.Inc() }
