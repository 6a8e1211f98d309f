package cdi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	ocispec "github.com/opencontainers/runtime-spec/specs-go"
	"sigs.k8s.io/yaml"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/slicer-operator/slicer/device-plugin/cdi"
)

func slice(uuid string) cdi.Slice {
	return cdi.Slice{MIGUUID: uuid, GPUUUID: "GPU-1234", GPUMinor: 3, Profile: "1g.10gb.me", PlacementStart: 6, PlacementSize: 1, GPUInstance: 9, ComputeInst: 0}
}

func TestWriteValidatesWithCDILibrary(t *testing.T) {
	dir := t.TempDir()
	w := &cdi.Writer{Dir: dir}
	name, err := w.Write(slice("MIG-aaaa-bbbb"))
	if err != nil {
		t.Fatal(err)
	}
	if name != "slicer.dev/mig=MIG-aaaa-bbbb" {
		t.Errorf("qualified name %q", name)
	}
	if err := cdi.Validate(w.Path("MIG-aaaa-bbbb")); err != nil {
		t.Fatal(err)
	}
	spec, err := cdiapi.ReadSpec(w.Path("MIG-aaaa-bbbb"), 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := spec.GetDevice("MIG-aaaa-bbbb")
	if dev == nil {
		t.Fatal("device missing from spec")
	}
	got := append([]string(nil), dev.ContainerEdits.Env...)
	sort.Strings(got)
	want := []string{"NVIDIA_VISIBLE_DEVICES=MIG-aaaa-bbbb", "SLICER_GPU_UUID=GPU-1234", "SLICER_MIG_DEVICE=MIG-aaaa-bbbb", "SLICER_MIG_PLACEMENT=6:1", "SLICER_MIG_PROFILE=1g.10gb.me"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}
	// Overwrite is atomic and idempotent; no temp files are left.
	if _, err := w.Write(slice("MIG-aaaa-bbbb")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want 1", len(entries))
	}
}

func TestRealModeDeviceNodes(t *testing.T) {
	proc := t.TempDir()
	gi := filepath.Join(proc, "driver/nvidia/capabilities/gpu3/mig/gi9")
	if err := os.MkdirAll(filepath.Join(gi, "ci0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gi, "access"), []byte("DeviceFileMinor: 75\nDeviceFileMode: 292\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gi, "ci0", "access"), []byte("DeviceFileMinor: 76\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	devices := "Character devices:\n  1 mem\n195 nvidia-frontend\n236 nvidia-caps\n237 nvidia-uvm\n\nBlock devices:\n  8 sd\n238 nvidia-caps-imex\n"
	if err := os.WriteFile(filepath.Join(proc, "devices"), []byte(devices), 0o644); err != nil {
		t.Fatal(err)
	}
	w := &cdi.Writer{Dir: t.TempDir(), Real: true, ProcRoot: proc}
	spec, err := w.Spec(slice("MIG-x"))
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		nodes = append(nodes, fmt.Sprintf("%s %s %d:%d", n.Path, n.Type, n.Major, n.Minor))
	}
	want := []string{"/dev/nvidiactl  0:0", "/dev/nvidia-uvm  0:0", "/dev/nvidia-uvm-tools  0:0", "/dev/nvidia3  0:0",
		"/dev/nvidia-caps/nvidia-cap75 c 236:75", "/dev/nvidia-caps/nvidia-cap76 c 236:76"}
	if d := cmp.Diff(want, nodes); d != "" {
		t.Errorf("device nodes (-want +got):\n%s", d)
	}
	// A driver that has no nvidia-caps major: the capability nodes by path only.
	if err := os.WriteFile(filepath.Join(proc, "devices"), []byte("Character devices:\n195 nvidia-frontend\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err = w.Spec(slice("MIG-x"))
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.Devices[0].ContainerEdits.DeviceNodes[4]; n.Path != "/dev/nvidia-caps/nvidia-cap75" || n.Type != "" || n.Major != 0 {
		t.Errorf("without an nvidia-caps major: %+v", n)
	}
	if err := os.WriteFile(filepath.Join(proc, "devices"), []byte(devices), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(slice("MIG-x")); err != nil {
		t.Fatal(err)
	}
	if err := cdi.Validate(w.Path("MIG-x")); err != nil {
		t.Error(err)
	}
	if _, err := (&cdi.Writer{Dir: t.TempDir(), Real: true, ProcRoot: t.TempDir()}).Spec(slice("MIG-x")); err == nil {
		t.Error("real mode without capability files succeeded")
	}
}

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	w := &cdi.Writer{Dir: dir}
	for _, u := range []string{"MIG-1", "MIG-2", "MIG-3"} {
		if _, err := w.Write(slice(u)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-slicer.dev-mig_123"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia.com-gpu.yaml"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	removed, err := w.RemoveStale(map[string]bool{"MIG-2": true})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(removed)
	if d := cmp.Diff([]string{"MIG-1", "MIG-3"}, removed); d != "" {
		t.Errorf("removed (-want +got):\n%s", d)
	}
	left, err := w.List()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"MIG-2"}, left); d != "" {
		t.Errorf("left (-want +got):\n%s", d)
	}
	if _, err := os.Stat(filepath.Join(dir, "nvidia.com-gpu.yaml")); err != nil {
		t.Errorf("another vendor's spec was touched: %v", err)
	}
	if err := w.Remove("MIG-2"); err != nil {
		t.Fatal(err)
	}
	if err := w.Remove("MIG-2"); err != nil {
		t.Errorf("removing a missing spec: %v", err)
	}
	if _, err := w.Write(slice("bad/name")); err == nil {
		t.Error("an illegal device name was accepted")
	}
}

// A claim's spec holds one device per slice, each exposing only its MIG device, passes the
// CDI library's validation, and reads back as the slices and the record it was written from.
func TestClaimSpecRoundTrip(t *testing.T) {
	w := &cdi.Writer{Dir: t.TempDir()}
	slices := []cdi.Slice{
		{MIGUUID: "MIG-a", GPUUUID: "GPU-0", Profile: "1g.10gb", PlacementStart: 3, PlacementSize: 1},
		{MIGUUID: "MIG-b", GPUUUID: "GPU-1", Profile: "3g.40gb", PlacementStart: 4, PlacementSize: 4},
	}
	rec := cdi.ClaimRecord{Namespace: "team-a", Name: "claim", Pods: []cdi.PodRef{{Name: "p", UID: "u-1"}, {Name: "q", UID: "u-2"}}}
	names, err := w.WriteClaim("uid-1", rec, slices)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"slicer.dev/mig=uid-1_MIG-a", "slicer.dev/mig=uid-1_MIG-b"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("names (-want +got):\n%s", diff)
	}
	if err := cdi.Validate(w.ClaimPath("uid-1")); err != nil {
		t.Fatal(err)
	}
	got, ok, err := w.ReadClaim("uid-1")
	if err != nil || !ok {
		t.Fatalf("read back: ok %v, %v", ok, err)
	}
	if diff := cmp.Diff(slices, got); diff != "" {
		t.Fatalf("slices (-want +got):\n%s", diff)
	}
	got2, _, err := w.ReadClaimSpec("uid-1")
	gotRec := got2.Record
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rec, gotRec); diff != "" {
		t.Fatalf("record (-want +got):\n%s", diff)
	}
	uids, err := w.ListClaims()
	if err != nil || len(uids) != 1 || uids[0] != "uid-1" {
		t.Fatalf("ListClaims = %v, %v", uids, err)
	}
	if err := w.RemoveClaim("uid-1"); err != nil {
		t.Fatal(err)
	}
	if err := w.RemoveClaim("uid-1"); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	if _, ok, err := w.ReadClaim("uid-1"); ok || err != nil {
		t.Fatalf("after remove: ok %v, %v", ok, err)
	}
}

// What a container that consumes a claim of two MIG devices gets from the runtime (the CDI
// library's injection, as containerd runs it): NVIDIA_VISIBLE_DEVICES lists both, in the
// claim's order, as the device plugin's Allocate does; a claim of one device lists it alone.
// SLICER_MIG_DEVICE and the other per-device variables name one device each, and with two
// the runtime keeps the last device's.
func TestClaimSpecVisibleDevices(t *testing.T) {
	// what a claim's spec records (ReadClaim): no GPU minor or instance ids in emulated mode
	slice := func(uuid string) cdi.Slice {
		return cdi.Slice{MIGUUID: uuid, GPUUUID: "GPU-1234", Profile: "1g.10gb", PlacementStart: 6, PlacementSize: 1}
	}
	for _, tc := range []struct {
		name    string
		slices  []cdi.Slice
		visible string
		device  string
	}{
		{"one device", []cdi.Slice{slice("MIG-a")}, "MIG-a", "MIG-a"},
		{"two devices", []cdi.Slice{slice("MIG-a"), slice("MIG-b")}, "MIG-a,MIG-b", "MIG-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w := &cdi.Writer{Dir: dir}
			names, err := w.WriteClaim("uid-1", cdi.ClaimRecord{}, tc.slices)
			if err != nil {
				t.Fatal(err)
			}
			cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			oci := &ocispec.Spec{Process: &ocispec.Process{Env: []string{"PATH=/bin"}}}
			if unresolved, err := cache.InjectDevices(oci, names...); err != nil {
				t.Fatalf("inject %v: %v (unresolved %v)", names, err, unresolved)
			}
			env := map[string]string{}
			for _, kv := range oci.Process.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			if got := env[cdi.EnvVisibleDevices]; got != tc.visible {
				t.Errorf("%s = %q, want %q (env %v)", cdi.EnvVisibleDevices, got, tc.visible, oci.Process.Env)
			}
			if got := env[cdi.EnvMIGDevice]; got != tc.device {
				t.Errorf("%s = %q, want %q", cdi.EnvMIGDevice, got, tc.device)
			}
			// the record of the claim is still its devices alone
			got, ok, err := w.ReadClaim("uid-1")
			if err != nil || !ok {
				t.Fatalf("read back: ok %v, %v", ok, err)
			}
			if diff := cmp.Diff(tc.slices, got); diff != "" {
				t.Errorf("slices (-want +got):\n%s", diff)
			}
		})
	}
}

// A slice's spec is named after its device ID, not its MIG UUID: rewritten for a new
// instance at the slot (a reboot), the same name points at the new MIG device.
func TestNamedSpecFollowsTheInstance(t *testing.T) {
	w := &cdi.Writer{Dir: t.TempDir()}
	const id = "GPU-1234_1g.10gb.me_6"
	for _, u := range []string{"MIG-old", "MIG-new"} {
		s := slice(u)
		s.Name = id
		name, err := w.Write(s)
		if err != nil {
			t.Fatal(err)
		}
		if name != "slicer.dev/mig="+id {
			t.Errorf("qualified name %q", name)
		}
	}
	spec, err := cdiapi.ReadSpec(w.Path(id), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := append([]string(nil), spec.GetDevice(id).ContainerEdits.Env...)
	sort.Strings(got)
	if got[0] != "NVIDIA_VISIBLE_DEVICES=MIG-new" || got[2] != "SLICER_MIG_DEVICE=MIG-new" {
		t.Errorf("env %v, want the new MIG device", got)
	}
	if l, _ := w.List(); !cmp.Equal(l, []string{id}) {
		t.Errorf("specs %v, want only %s", l, id)
	}
}

// A set's name does not depend on the order of its device IDs (the kubelet gives them in no
// particular order), its spec lists the MIG devices in the order of the sorted IDs, and
// RemoveStale leaves it to the device plugin.
func TestSetSpec(t *testing.T) {
	w := &cdi.Writer{Dir: t.TempDir()}
	if cdi.SetName([]string{"b", "a"}) != cdi.SetName([]string{"a", "b"}) || cdi.SetName([]string{"a", "b"}) == cdi.SetName([]string{"a", "c"}) {
		t.Error("SetName depends on order, or two sets share a name")
	}
	name, err := w.WriteSet([]string{"id-b", "id-a"}, []string{"MIG-b", "MIG-a"})
	if err != nil {
		t.Fatal(err)
	}
	set := cdi.SetName([]string{"id-a", "id-b"})
	if name != cdi.QualifiedName(set) || !cdi.IsSet(set) {
		t.Errorf("qualified name %q, set %q", name, set)
	}
	if err := cdi.Validate(w.Path(set)); err != nil {
		t.Fatal(err)
	}
	spec, err := cdiapi.ReadSpec(w.Path(set), 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"NVIDIA_VISIBLE_DEVICES=MIG-a,MIG-b"}, spec.GetDevice(set).ContainerEdits.Env); d != "" {
		t.Errorf("set env (-want +got):\n%s", d)
	}
	if _, err := w.WriteSet([]string{"a"}, nil); err == nil {
		t.Error("a set with fewer MIG devices than IDs was written")
	}
	if removed, err := w.RemoveStale(nil); err != nil || len(removed) != 0 {
		t.Errorf("RemoveStale removed %v (%v), want the set kept", removed, err)
	}
}

// A claim with a MIG device and a whole GPU: the whole GPU's device exposes the GPU alone,
// the spec-level NVIDIA_VISIBLE_DEVICES lists both UUIDs in order, and both read back.
func TestClaimSpecWithWholeGPU(t *testing.T) {
	w := &cdi.Writer{Dir: t.TempDir()}
	s := cdi.Slice{MIGUUID: "MIG-a", GPUUUID: "GPU-0", Profile: "1g.10gb", PlacementStart: 3, PlacementSize: 1}
	names, err := w.WriteClaim("uid-1", cdi.ClaimRecord{Namespace: "ns", Name: "c"}, []cdi.Slice{s}, cdi.WholeGPU{UUID: "GPU-1", Minor: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"slicer.dev/mig=uid-1_MIG-a", "slicer.dev/mig=uid-1_GPU-1"}; !slices.Equal(names, want) {
		t.Fatalf("names %v, want %v", names, want)
	}
	if err := cdi.Validate(w.ClaimPath("uid-1")); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(w.ClaimPath("uid-1"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if want := []string{"NVIDIA_VISIBLE_DEVICES=MIG-a,GPU-1"}; !slices.Equal(spec.ContainerEdits.Env, want) {
		t.Errorf("spec-level env %v, want %v", spec.ContainerEdits.Env, want)
	}
	if want := []string{"SLICER_GPU_UUID=GPU-1"}; !slices.Equal(spec.Devices[1].ContainerEdits.Env, want) {
		t.Errorf("whole GPU's env %v, want %v", spec.Devices[1].ContainerEdits.Env, want)
	}
	got, ok, err := w.ReadClaimSpec("uid-1")
	if err != nil || !ok {
		t.Fatalf("read back: ok %v, %v", ok, err)
	}
	if diff := cmp.Diff(cdi.ClaimSpec{Record: cdi.ClaimRecord{Namespace: "ns", Name: "c"}, Slices: []cdi.Slice{s}, Whole: []cdi.WholeGPU{{UUID: "GPU-1"}}}, got); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
}
