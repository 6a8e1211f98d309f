package dra

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig"
)

// The node's record of what it prepared is the authority on whose an instance is. The API
// says which claims are allocated which devices, but a namespace editor may delete a claim
// and strip its finalizer while its pod runs: the stock scheduler then sees the device free
// and allocates it to the next claim. The record, each prepared claim's CDI spec with the
// claim and the pods it was prepared for (cdi.ClaimRecord), outlives that:
//   - Prepare never prepares a device whose placement overlaps an instance the record keeps
//     for another claim; the claim fails (the kubelet retries), with a Warning Event on it
//     and slicer_agent_allocation_conflicts_total counted;
//   - what a record keeps is no orphan: the sweep leaves its instances alone;
//   - a record is released (its instances destroyed, its spec removed) by the kubelet's
//     Unprepare, or, once its claim is no longer allocated in the API, on evidence that the
//     pods it was prepared for are done: a live read finds no pod of that name and UID, or
//     one that finished. A record that names no pod (written before the pods were recorded)
//     is released after the orphan grace, as before.
// (docs/design/dra.md, "A deleted claim"; docs/design/threat-model.md.)

// ReasonDevicePreparedForAnotherClaim is the Warning Event a claim gets when its device
// overlaps an instance this node prepared for another claim.
const ReasonDevicePreparedForAnotherClaim = "DevicePreparedForAnotherClaim"

// record is one prepared claim's spec, read back: its MIG devices (Slices) and its whole GPUs.
type record struct {
	UID    string
	Claim  cdi.ClaimRecord
	Slices []cdi.Slice
	Whole  []cdi.WholeGPU
}

// records reads every claim spec on the node, by claim UID. A spec that cannot be read is
// skipped and logged (its own Unprepare reports it; it must not block others).
func (d *Driver) records() (map[string]record, error) {
	uids, err := d.opts.CDI.ListClaims()
	if err != nil {
		return nil, err
	}
	out := make(map[string]record, len(uids))
	for _, uid := range uids {
		spec, ok, err := d.opts.CDI.ReadClaimSpec(uid)
		if err != nil {
			d.opts.Log.Error(err, "unreadable claim spec", "claim", uid)
			continue
		}
		if ok {
			out[uid] = record{UID: uid, Claim: spec.Record, Slices: spec.Slices, Whole: spec.Whole}
		}
	}
	return out, nil
}

// preparedFor is the record of a claim other than uid that keeps an instance overlapping
// slot, or slot's GPU whole, if any (the lowest UID, for a stable answer).
func preparedFor(recs map[string]record, uid string, slot mig.Slot) (record, bool) {
	for _, u := range sortedRecordUIDs(recs) {
		if u == uid {
			continue
		}
		for _, s := range recs[u].Slices {
			kept := mig.Slot{GPU: s.GPUUUID, Profile: s.Profile, Placement: mig.Placement{Start: s.PlacementStart, Size: s.PlacementSize}}
			if kept.Overlaps(slot) {
				return recs[u], true
			}
		}
		for _, w := range recs[u].Whole {
			if w.UUID == slot.GPU {
				return recs[u], true
			}
		}
	}
	return record{}, false
}

// sortedRecordUIDs are the records' claim UIDs, sorted.
func sortedRecordUIDs(recs map[string]record) []string {
	uids := make([]string, 0, len(recs))
	for u := range recs {
		uids = append(uids, u)
	}
	sort.Strings(uids)
	return uids
}

// claimRecord is what Prepare records for claim c: the claim and the pods it is reserved for.
func claimRecord(c *resourceapi.ResourceClaim) cdi.ClaimRecord {
	r := cdi.ClaimRecord{Namespace: c.Namespace, Name: c.Name}
	for _, ref := range c.Status.ReservedFor {
		if ref.Resource == "pods" && ref.APIGroup == "" {
			r.Pods = append(r.Pods, cdi.PodRef{Name: ref.Name, UID: string(ref.UID)})
		}
	}
	return r
}

// refuseConflict reports a claim whose device the record keeps for another claim: an Event
// on the claim (naming no other tenant's object), the conflict counted, the details logged.
// It returns the error the kubelet gets (shown on the claim's pod, so it names no other
// tenant's object either).
func (d *Driver) refuseConflict(c *resourceapi.ResourceClaim, device string, other record) error {
	d.opts.Metrics.Conflicts.Inc()
	d.opts.Log.Info("claim refused: its device overlaps an instance prepared for another claim", "claim", claimRef(c.Namespace, c.Name, c.UID),
		"device", device, "preparedFor", claimRef(other.Claim.Namespace, other.Claim.Name, types.UID(other.UID)), "pods", other.Claim.Pods)
	msg := fmt.Sprintf("device %s on node %s overlaps a device (a MIG instance, or its whole GPU) the node prepared for another claim that is still in use; "+
		"it is prepared for this claim once that claim is released", device, d.opts.NodeName)
	engine.Emit(d.opts.Events, c, corev1.EventTypeWarning, ReasonDevicePreparedForAnotherClaim, "%s", msg)
	return fmt.Errorf("%s", msg)
}

// podsDone reports whether every pod a record names is gone or finished, read live: no pod of
// that name, one with another UID, or one in phase Succeeded or Failed.
func (d *Driver) podsDone(ctx context.Context, r cdi.ClaimRecord) (bool, error) {
	for _, p := range r.Pods {
		pod, err := d.opts.Client.CoreV1().Pods(r.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("get pod %s/%s: %w", r.Namespace, p.Name, err)
		}
		if string(pod.UID) != p.UID || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		return false, nil
	}
	return true, nil
}

// recordedSlices are the observed instances a record keeps (findRecorded).
func recordedSlices(obs *engine.Observation, r record) []engine.Slice {
	var out []engine.Slice
	for _, s := range r.Slices {
		if o, ok := findRecorded(obs, s); ok {
			out = append(out, o)
		}
	}
	return out
}

// release destroys what a record keeps (except an instance another record keeps too) and
// removes its spec; the spec stays when a destroy fails, so the next sync retries.
func (d *Driver) release(obs *engine.Observation, recs map[string]record, r record) error {
	recordedBy := recordedMIGs(recs)
	for _, s := range recordedSlices(obs, r) {
		if others := otherClaims(recordedBy[s.MIGUUID], r.UID); len(others) > 0 {
			continue
		}
		if err := obs.DestroySlice(s, d.opts.Metrics); err != nil {
			return fmt.Errorf("destroy the instance of claim %s at %s: %w", r.UID, s.Slot, err)
		}
	}
	return d.opts.CDI.RemoveClaim(r.UID)
}

// recordedMIGs maps each MIG device UUID the records keep to the claims' UIDs.
func recordedMIGs(recs map[string]record) map[string][]string {
	out := map[string][]string{}
	for uid, r := range recs {
		for _, s := range r.Slices {
			out[s.MIGUUID] = append(out[s.MIGUUID], uid)
		}
	}
	return out
}

// recordsMIG reports whether record r keeps the MIG device u.
func recordsMIG(r record, u string) bool {
	for _, s := range r.Slices {
		if s.MIGUUID == u {
			return true
		}
	}
	return false
}
