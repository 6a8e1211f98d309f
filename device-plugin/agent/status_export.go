package agent

import (
	"context"
	"time"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// This file exposes the NodeAccelerator status writer (status.go, publish.go) to the DRA
// frontend (device-plugin/dra): the same rendering, the same write coalescing and the same
// guard against writing from a stale copy as the Reconciler's.

// StatusWriter writes one node's NodeAccelerator status. Not safe for concurrent use: the
// caller serializes its calls (the DRA driver holds its lock).
type StatusWriter struct{ w statusWriter }

// NewStatusWriter returns a writer for node's NodeAccelerator through c (created when
// absent). every is the least time between two writes that only move slices
// (Options.PublishInterval: 0 is DefaultPublishInterval, negative is no coalescing); now is
// the clock (nil: time.Now); events go to rec (may be nil).
func NewStatusWriter(c client.Client, rec events.EventRecorder, node string, every time.Duration, now func() time.Time) *StatusWriter {
	if every == 0 {
		every = DefaultPublishInterval
	}
	if now == nil {
		now = time.Now
	}
	return &StatusWriter{w: statusWriter{client: c, recorder: rec, node: node, every: every, now: now}}
}

// ClaimView is the node as the DRA frontend sees it.
type ClaimView struct {
	Emulated bool
	// DriverErr is why NVML is not usable (Obs is then nil).
	DriverErr error
	// NotServing is why the kubelet plugin does not serve (nil: it does).
	NotServing error
	// Conflict: another tool owns the node (migapi.NodeForeign).
	Conflict migapi.Foreign
	Obs      *Observation
	// Claim names the allocated claim that holds observed slice s of GPU g (false: none).
	Claim func(g *GPU, s Slice) (slicerv1alpha1.ClaimReference, bool)
}

// Publish writes the status of v as publish does for the Reconciler: each observed slice
// that a claim holds is Allocated with that claim, any other is Orphaned (the DRA frontend
// destroys instances within one sync, so none is ever seen PendingDelete). It returns how
// long a coalesced write waits (0: none pending); the caller publishes again by then.
func (s *StatusWriter) Publish(ctx context.Context, v ClaimView) (time.Duration, error) {
	return s.w.publish(ctx, v.nodeView())
}

func (v ClaimView) nodeView() nodeView {
	nv := nodeView{Emulated: v.Emulated, DriverErr: v.DriverErr, NotServing: v.NotServing, Conflict: v.Conflict, Obs: v.Obs,
		States: map[string]slicerv1alpha1.SliceState{}, Claims: map[string]slicerv1alpha1.ClaimReference{}}
	if v.Obs == nil || v.Claim == nil {
		return nv
	}
	for _, g := range v.Obs.GPUs {
		for _, sl := range g.Slices {
			if ref, ok := v.Claim(g, sl); ok {
				nv.States[sliceKey(sl)], nv.Claims[sliceKey(sl)] = slicerv1alpha1.SliceAllocated, ref
			}
		}
	}
	return nv
}
