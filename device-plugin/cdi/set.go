package cdi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// A container that receives several devices of one resource from the device plugin gets,
// after their own CDI devices, a set device named after those device IDs (SetName). Its
// spec's only edit sets EnvVisibleDevices to all their MIG devices; listed last, it
// overrides the value each device's own spec sets. The plugin writes it at Allocate and
// again at PreStartContainer, before every start of the container: after a reboot the
// devices' instances are recreated with new MIG UUIDs, and the kubelet starts the container
// with the CDI device names it checkpointed at Allocate, never asking for new ones.

const setPrefix = "set-"

// SetName is the CDI device name of a set of device IDs (in any order): "set-" and 32 hex
// digits of their SHA-256, so that PreStartContainer, which gets the IDs in no particular
// order, finds the name Allocate gave.
func SetName(deviceIDs []string) string {
	ids := slices.Clone(deviceIDs)
	slices.Sort(ids)
	sum := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return setPrefix + hex.EncodeToString(sum[:16])
}

// IsSet reports whether a device name (as List gives it) is a set's.
func IsSet(name string) bool { return strings.HasPrefix(name, setPrefix) }

// WriteSet writes the spec of the set of deviceIDs, whose MIG devices are migUUIDs in the
// same order, and returns its qualified device name. EnvVisibleDevices lists the MIG devices
// in the order of the sorted device IDs.
func (w *Writer) WriteSet(deviceIDs, migUUIDs []string) (string, error) {
	if len(deviceIDs) != len(migUUIDs) {
		return "", fmt.Errorf("CDI set: %d device IDs, %d MIG devices", len(deviceIDs), len(migUUIDs))
	}
	order := make([]int, len(deviceIDs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(deviceIDs[a], deviceIDs[b]) })
	visible := make([]string, 0, len(order))
	for _, i := range order {
		visible = append(visible, migUUIDs[i])
	}
	name := SetName(deviceIDs)
	spec := &cdispec.Spec{Kind: Kind, Devices: []cdispec.Device{{Name: name,
		ContainerEdits: cdispec.ContainerEdits{Env: []string{EnvVisibleDevices + "=" + VisibleDevices(visible)}}}}}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return "", fmt.Errorf("CDI spec version: %w", err)
	}
	spec.Version = v
	if err := w.writeSpec(w.Path(name), spec); err != nil {
		return "", err
	}
	return QualifiedName(name), nil
}
