package cdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// A DRA frontend writes one spec per prepared ResourceClaim (transient name
// "claim-<claim UID>") holding one CDI device per MIG device of the claim, named
// "<claim UID>_<MIG UUID>": the claim UID keeps a runtime's cached spec of an earlier
// claim from matching (see kubeletplugin.DRAPlugin). Each device's edits are the ones
// Spec gives that MIG device alone; the spec-level edits set EnvVisibleDevices to every MIG
// device of the claim, in the claim's order: what the device plugin's Allocate sets for a
// container's devices. (A container that consumes several claims gets one value per claim's
// spec and the runtime keeps the last: DRA tells a plugin about claims, not containers.)
// The spec is also the node's record of what was prepared for the claim: ReadClaim gives
// the slices back from its devices' environment, ReadClaimSpec the claim and the pods it
// was prepared for from the spec's annotations (a spec written before those were recorded
// has none).

const claimPrefix = "claim-"

// Annotations of a claim's spec (the node's record, ClaimRecord).
const (
	annClaimNamespace = Vendor + "/claim-namespace"
	annClaimName      = Vendor + "/claim-name"
	// annClaimPods lists the pods as "<name>/<uid>", comma-separated.
	annClaimPods = Vendor + "/claim-pods"
)

// ClaimRecord is what a claim's spec records besides its slices: the claim, and the pods it
// was prepared for (the claim's status.reservedFor then), which say when what it holds may
// go even after the claim is gone from the API.
type ClaimRecord struct {
	Namespace, Name string
	Pods            []PodRef
}

// PodRef is a pod of the claim's namespace, by name and UID.
type PodRef struct {
	Name, UID string
}

func (r ClaimRecord) annotations() map[string]string {
	if r.Namespace == "" && r.Name == "" && len(r.Pods) == 0 {
		return nil
	}
	pods := make([]string, 0, len(r.Pods))
	for _, p := range r.Pods {
		pods = append(pods, p.Name+"/"+p.UID)
	}
	return map[string]string{annClaimNamespace: r.Namespace, annClaimName: r.Name, annClaimPods: strings.Join(pods, ",")}
}

func recordOf(ann map[string]string) ClaimRecord {
	r := ClaimRecord{Namespace: ann[annClaimNamespace], Name: ann[annClaimName]}
	for _, p := range strings.Split(ann[annClaimPods], ",") {
		if name, uid, ok := strings.Cut(p, "/"); ok && name != "" && uid != "" {
			r.Pods = append(r.Pods, PodRef{Name: name, UID: uid})
		}
	}
	return r
}

// ClaimPath is where the spec of a claim is written.
func (w *Writer) ClaimPath(claimUID string) string {
	return filepath.Join(w.Dir, cdiapi.GenerateTransientSpecName(Vendor, Class, claimPrefix+claimUID)+".yaml")
}

// ClaimDeviceName is the CDI device name of one MIG device of a claim.
func ClaimDeviceName(claimUID, migUUID string) string { return claimUID + "_" + migUUID }

// WriteClaim writes the spec of a claim atomically, with its record, and returns the
// qualified device name of each slice, in order, then of each whole GPU (whole.go): a whole
// GPU's device is named "<claim UID>_<GPU UUID>" and has the edits of WholeSpec but
// EnvVisibleDevices, which the spec-level edits set to every UUID of the claim (its MIG
// devices', then its whole GPUs').
func (w *Writer) WriteClaim(claimUID string, rec ClaimRecord, migSlices []Slice, whole ...WholeGPU) ([]string, error) {
	spec := &cdispec.Spec{Kind: Kind, Annotations: rec.annotations()}
	names := make([]string, 0, len(migSlices)+len(whole))
	visible := make([]string, 0, len(migSlices)+len(whole))
	add := func(d cdispec.Device, name, uuid string) {
		d.Name = name
		spec.Devices = append(spec.Devices, d)
		names = append(names, QualifiedName(name))
		visible = append(visible, uuid)
	}
	for _, s := range migSlices {
		one, err := w.Spec(s)
		if err != nil {
			return nil, err
		}
		add(one.Devices[0], ClaimDeviceName(claimUID, s.MIGUUID), s.MIGUUID)
	}
	for _, g := range whole {
		one, err := w.WholeSpec(g)
		if err != nil {
			return nil, err
		}
		d := one.Devices[0]
		d.ContainerEdits.Env = slices.DeleteFunc(d.ContainerEdits.Env, func(kv string) bool { return strings.HasPrefix(kv, EnvVisibleDevices+"=") })
		add(d, ClaimDeviceName(claimUID, g.UUID), g.UUID)
	}
	if len(visible) > 0 {
		spec.ContainerEdits.Env = []string{EnvVisibleDevices + "=" + VisibleDevices(visible)}
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec version: %w", err)
	}
	spec.Version = v
	if err := w.writeSpec(w.ClaimPath(claimUID), spec); err != nil {
		return nil, err
	}
	return names, nil
}

// ReadClaim reads the slices a claim's spec records; ok is false when there is no spec.
func (w *Writer) ReadClaim(claimUID string) ([]Slice, bool, error) {
	spec, ok, err := w.ReadClaimSpec(claimUID)
	return spec.Slices, ok, err
}

// ClaimSpec is a claim's spec read back: its record, its slices and its whole GPUs (only
// their UUIDs are read back).
type ClaimSpec struct {
	Record ClaimRecord
	Slices []Slice
	Whole  []WholeGPU
}

// ReadClaimSpec reads a claim's spec; ok is false when there is no spec.
func (w *Writer) ReadClaimSpec(claimUID string) (out ClaimSpec, ok bool, err error) {
	data, err := os.ReadFile(w.ClaimPath(claimUID))
	if errors.Is(err, os.ErrNotExist) {
		return out, false, nil
	}
	if err != nil {
		return out, false, fmt.Errorf("read CDI spec of claim %s: %w", claimUID, err)
	}
	var spec cdispec.Spec
	if err := yaml.Unmarshal(data, &spec); err != nil {
		return out, false, fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
	}
	out.Record = recordOf(spec.Annotations)
	for _, d := range spec.Devices {
		if uuid, ok := wholeFromEnv(d.ContainerEdits.Env); ok {
			out.Whole = append(out.Whole, WholeGPU{UUID: uuid})
			continue
		}
		s, err := sliceFromEnv(d.ContainerEdits.Env)
		if err != nil {
			return out, false, fmt.Errorf("CDI spec of claim %s, device %s: %w", claimUID, d.Name, err)
		}
		out.Slices = append(out.Slices, s)
	}
	return out, true, nil
}

// wholeFromEnv is the GPU UUID of a whole GPU's device edits: EnvGPUUUID and no MIG device.
func wholeFromEnv(env []string) (string, bool) {
	uuid, mig := "", false
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case EnvGPUUUID:
			uuid = v
		case EnvMIGDevice:
			mig = true
		}
	}
	return uuid, uuid != "" && !mig
}

func sliceFromEnv(env []string) (Slice, error) {
	var s Slice
	var placement string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case EnvMIGDevice:
			s.MIGUUID = v
		case EnvGPUUUID:
			s.GPUUUID = v
		case EnvMIGProfile:
			s.Profile = v
		case EnvMIGPlacement:
			placement = v
		}
	}
	a, b, ok := strings.Cut(placement, ":")
	start, errA := strconv.Atoi(a)
	size, errB := strconv.Atoi(b)
	if s.MIGUUID == "" || s.GPUUUID == "" || !ok || errA != nil || errB != nil {
		return s, fmt.Errorf("incomplete environment %q", env)
	}
	s.PlacementStart, s.PlacementSize = start, size
	return s, nil
}

// RemoveClaim deletes the spec of a claim; a missing spec is not an error.
func (w *Writer) RemoveClaim(claimUID string) error {
	if err := os.Remove(w.ClaimPath(claimUID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// ListClaims returns the UIDs of the claims that have a spec.
func (w *Writer) ListClaims() ([]string, error) {
	names, err := w.List()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if uid, ok := strings.CutPrefix(n, claimPrefix); ok {
			out = append(out, uid)
		}
	}
	return out, nil
}
