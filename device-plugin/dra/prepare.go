package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// PrepareResourceClaims realizes each claim's devices of this node's pool: the instance at
// the device's placement is reused when it is there (a retry, a restart), finished when only
// its GPU instance is, created when the placement is free; an overlapping instance fails the
// claim (the kubelet retries; an orphan in the way is collected after its grace). The
// claim's CDI spec is written last, so a claim whose spec exists is fully realized; it
// records the claim and its pods (record.go). A device that another allocated claim also
// holds, or that overlaps an instance the node's record keeps for another claim (one deleted
// from the API while its pod runs), fails the claim: the plugin is the last line of defense
// against a double allocation (kubeletplugin.DRAPlugin).
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	start := d.opts.Now() // the kubelet's call, before waiting for the lock
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.current(ctx, claims...)
	if err != nil {
		return nil, err
	}
	all, obs, conflict := v.claims, v.obs, v.conflict
	held := explained(all, d.opts.NodeName)
	recs, err := d.records()
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		var devs []kubeletplugin.Device
		var err error
		if conflict.Present() {
			err = foreignErr(conflict)
		} else {
			devs, err = d.prepareClaim(ctx, obs, v.modes, all, held, recs, c)
		}
		d.opts.Metrics.DRARequests.WithLabelValues("prepare", result(err)).Inc()
		if err != nil {
			d.opts.Log.Error(err, "prepare failed", "claim", claimRef(c.Namespace, c.Name, c.UID))
		} else {
			d.opts.Metrics.RealizeDuration.Observe(d.opts.Now().Sub(start).Seconds())
			d.opts.Log.Info("claim prepared", "claim", claimRef(c.Namespace, c.Name, c.UID), "devices", len(devs))
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs, Err: err}
	}
	d.poke()
	return out, nil
}

func (d *Driver) prepareClaim(ctx context.Context, obs *engine.Observation, modes map[string]migapi.ModePolicy, all []*resourceapi.ResourceClaim,
	held map[string][]string, recs map[string]record, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	allocs, err := claimDevices(c, d.opts.NodeName)
	if err != nil {
		return nil, err
	}
	var (
		specs []cdi.Slice
		whole []cdi.WholeGPU
		devs  []kubeletplugin.Device
	)
	for _, a := range allocs {
		others, err := d.doubleAllocated(ctx, all, held[a.Device], string(c.UID), a.Device)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", a.Device, err)
		}
		if len(others) > 0 {
			return nil, fmt.Errorf("device %s is also allocated to claims %v", a.Device, others)
		}
		devs = append(devs, kubeletplugin.Device{Requests: []string{a.Request}, PoolName: d.opts.NodeName, DeviceName: a.Device})
		if a.Whole {
			w, err := d.prepareWhole(obs, modes, held, recs, c, a)
			if err != nil {
				return nil, fmt.Errorf("device %s: %w", a.Device, err)
			}
			whole = append(whole, w)
			continue
		}
		if err := d.prepareMIGMode(obs, modes, held, recs, c, a); err != nil {
			return nil, fmt.Errorf("device %s: %w", a.Device, err)
		}
		slot, err := resolve(obs, a.Ref)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", a.Device, err)
		}
		if other, kept := preparedFor(recs, string(c.UID), slot); kept {
			return nil, d.refuseConflict(c, a.Device, other)
		}
		g := obs.GPUByUUID(slot.GPU)
		s, err := d.realize(obs, g, slot, recs[string(c.UID)])
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", a.Device, err)
		}
		g.Slices = append(slices.DeleteFunc(g.Slices, func(o engine.Slice) bool { return o.Slot == s.Slot }), s)
		specs = append(specs, engine.CDISlice(g, s))
	}
	rec := claimRecord(c)
	ids, err := d.opts.CDI.WriteClaim(string(c.UID), rec, specs, whole...)
	d.opts.Metrics.CDIWrites.WithLabelValues(result(err)).Inc()
	if err != nil {
		return nil, err
	}
	recs[string(c.UID)] = record{UID: string(c.UID), Claim: rec, Slices: specs, Whole: whole}
	// WriteClaim names the MIG devices first, then the whole GPUs.
	mi, wi := 0, len(specs)
	for i, a := range allocs {
		if a.Whole {
			devs[i].CDIDeviceIDs = []string{ids[wi]}
			wi++
		} else {
			devs[i].CDIDeviceIDs = []string{ids[mi]}
			mi++
		}
	}
	return devs, nil
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// realize makes the instance at slot exist and be complete (see PrepareResourceClaims); own
// is the claim's record, if it was prepared before.
func (d *Driver) realize(obs *engine.Observation, g *engine.GPU, slot mig.Slot, own record) (engine.Slice, error) {
	st, s := decide(g.Slices, slot)
	switch {
	case st == stepReuse && s.Unhealthy != "" && !recordsMIG(own, s.MIGUUID):
		// An instance an XID broke is not handed out to a claim that did not have it: it
		// goes, and a new one is made (the claim that had it keeps it, unhealthy).
		if err := obs.DestroySlice(s, d.opts.Metrics); err != nil {
			return engine.Slice{}, fmt.Errorf("the instance at %s is unhealthy (%s) and could not be destroyed: %w", slot, s.Unhealthy, err)
		}
		return obs.CreateSlice(slot, d.opts.Metrics)
	case st == stepReuse:
		return s, nil
	case st == stepFinish:
		return obs.FinishSlice(s, d.opts.Metrics)
	case st == stepBlocked:
		return engine.Slice{}, fmt.Errorf("placement %s is taken by the instance at %s", slot, s.Slot)
	}
	return obs.CreateSlice(slot, d.opts.Metrics)
}

// doubleAllocated lists the claims other than uid that hold device, each confirmed by a live
// read (the cache may still hold a claim deleted a moment ago).
func (d *Driver) doubleAllocated(ctx context.Context, all []*resourceapi.ResourceClaim, holders []string, uid, device string) ([]string, error) {
	var out []string
	for _, o := range otherClaims(holders, uid) {
		held, err := d.stillHolds(ctx, all, o, device)
		if err != nil {
			return nil, err
		}
		if held {
			out = append(out, o)
		}
	}
	return out, nil
}

// view is what Prepare and Unprepare decide from (current).
type view struct {
	claims   []*resourceapi.ResourceClaim
	obs      *engine.Observation
	conflict migapi.Foreign
	// modes is the GPU mode policy of each GPU, by UUID (engine.ModePolicies; whole.go).
	modes map[string]migapi.ModePolicy
}

// current reads what Prepare and Unprepare decide from: the allocated claims (the claim
// cache, with given in place of their cached copies; claims.go), the GPUs' instances (NVML),
// whether another tool owns the node (owner.go) and the GPUs' mode policies.
func (d *Driver) current(ctx context.Context, given ...*resourceapi.ResourceClaim) (view, error) {
	all, err := d.claims(given...)
	if err != nil {
		return view{}, err
	}
	conflict, labels, err := d.foreignOwner(ctx)
	if err != nil {
		return view{}, err
	}
	obs, err := d.observe()
	if err != nil {
		return view{}, fmt.Errorf("observe GPUs: %w", err)
	}
	return view{claims: all, obs: obs, conflict: conflict, modes: engine.ModePolicies(d.opts.GPUModes, obs, labels, d.opts.Log)}, nil
}

// UnprepareResourceClaims destroys what each claim was given. The claim's CDI spec says which
// MIG devices those are; without a spec (the claim was never fully prepared) the claim's
// allocation, if the API still has it, says where they are. An instance another claim's
// spec records is left alone. Nothing found is success: the claim is then not prepared, and
// any instance left behind is an orphan. An instance is never handed on to another claim
// allocated the same device: that claim's Prepare was refused while this claim's record kept
// the instance, and it gets a new one.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.current(ctx)
	if err != nil {
		return nil, err
	}
	obs, conflict := v.obs, v.conflict
	recs, err := d.records()
	if err != nil {
		return nil, err
	}
	recorded := recordedMIGs(recs)
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		var err error
		if conflict.Present() {
			// The claim is released, its instances are left (they show as orphans, and are
			// collected once the node is Slicer's again).
			err = d.opts.CDI.RemoveClaim(string(c.UID))
		} else {
			err = d.unprepareClaim(ctx, obs, recorded, c)
		}
		d.opts.Metrics.DRARequests.WithLabelValues("unprepare", result(err)).Inc()
		if err != nil {
			d.opts.Log.Error(err, "unprepare failed", "claim", claimRef(c.Namespace, c.Name, c.UID))
		} else {
			d.opts.Log.Info("claim unprepared", "claim", claimRef(c.Namespace, c.Name, c.UID))
		}
		out[c.UID] = err
	}
	d.poke()
	return out, nil
}

func (d *Driver) unprepareClaim(ctx context.Context, obs *engine.Observation, recordedBy map[string][]string, c kubeletplugin.NamespacedObject) error {
	uid := string(c.UID)
	recorded, ok, err := d.opts.CDI.ReadClaim(uid)
	if err != nil {
		return err
	}
	var targets []engine.Slice
	if ok {
		for _, r := range recorded {
			if s, found := findRecorded(obs, r); found {
				targets = append(targets, s)
			}
		}
	} else {
		if targets, err = d.allocatedInstances(ctx, obs, c); err != nil {
			return err
		}
	}
	var errs []error
	for _, s := range targets {
		g := obs.GPUByUUID(s.GPU)
		name, _ := sliceDevice(g, s)
		if others := otherClaims(recordedBy[s.MIGUUID], uid); len(others) > 0 {
			// Written before Prepare checked the record (an upgrade): never destroy what
			// another claim was given.
			d.opts.Log.Info("instance kept: another claim's CDI spec records it", "device", name, "claims", others)
			continue
		}
		if err := obs.DestroySlice(s, d.opts.Metrics); err != nil {
			errs = append(errs, fmt.Errorf("destroy %s: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err // the spec stays: the next Unprepare retries from it
	}
	return d.opts.CDI.RemoveClaim(uid)
}

// findRecorded is the observed instance a claim's spec recorded: the same MIG device at the
// same placement of the same GPU, or what is left of it there, a GPU instance whose compute
// instance is gone (an Unprepare killed between the two destroys). No other claim can have
// made that one: the record keeps the placement from every other claim's Prepare.
func findRecorded(obs *engine.Observation, r cdi.Slice) (engine.Slice, bool) {
	g := obs.GPUByUUID(r.GPUUUID)
	if g == nil {
		return engine.Slice{}, false
	}
	for _, s := range g.Slices {
		if (s.MIGUUID == r.MIGUUID || s.MIGUUID == "") && s.Placement.Start == r.PlacementStart && s.Placement.Size == r.PlacementSize {
			return s, true
		}
	}
	return engine.Slice{}, false
}

// allocatedInstances are the observed instances at the placements of the claim's allocation,
// when the API still has the claim (same UID) allocated.
func (d *Driver) allocatedInstances(ctx context.Context, obs *engine.Observation, c kubeletplugin.NamespacedObject) ([]engine.Slice, error) {
	claim, err := d.opts.Client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get claim: %w", err)
	}
	if claim.UID != c.UID || claim.Status.Allocation == nil {
		return nil, nil
	}
	allocs, err := claimDevices(claim, d.opts.NodeName)
	if err != nil {
		return nil, err
	}
	var out []engine.Slice
	for _, a := range allocs {
		if a.Whole {
			continue // a whole GPU has no instance
		}
		slot, err := resolve(obs, a.Ref)
		if err != nil {
			continue
		}
		if st, s := decide(obs.GPUByUUID(slot.GPU).Slices, slot); st == stepReuse || st == stepFinish {
			out = append(out, s)
		}
	}
	return out, nil
}

// otherClaims is holders without uid.
func otherClaims(holders []string, uid string) []string {
	return slices.DeleteFunc(slices.Clone(holders), func(u string) bool { return u == uid })
}
