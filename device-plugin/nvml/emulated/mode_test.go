package emulated_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvmltest"
	"github.com/slicer-operator/slicer/internal/mig"
)

// What turning MIG mode off on an idle, empty GPU activates as, by model: NVIDIA's MIG user
// guide ("Enable MIG Mode") says the Ampere GPUs need a GPU reset, Hopper and later do not.
// Written out per model, so that a new model needs a decision here.
var switchActivation = map[mig.Model]nvml.Return{
	mig.A30_24GB:    nvml.ErrorResetRequired,
	mig.A100_40GB:   nvml.ErrorResetRequired,
	mig.A100_80GB:   nvml.ErrorResetRequired,
	mig.H100_80GB:   nvml.Success,
	mig.H100_94GB:   nvml.Success,
	mig.GH200_96GB:  nvml.Success,
	mig.H200_141GB:  nvml.Success,
	mig.B200_180GB:  nvml.Success,
	mig.GB200_186GB: nvml.Success,
	mig.GH200_144GB: nvml.Success,
	mig.H20_96GB:    nvml.Success,
	mig.B300_288GB:  nvml.Success,
	mig.GB300_288GB: nvml.Success,
}

func TestModeConformance(t *testing.T) {
	for _, m := range mig.Models() {
		t.Run(m.String(), func(t *testing.T) {
			b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{m}})
			nvmltest.RunMode(t, b, 0, m, nvmltest.ModeHooks{
				Reset: func() error { return b.ResetGPU(0) },
				Hold:  func(held bool) { _ = b.HoldGPU(0, held) },
			})
		})
	}
}

func TestSwitchActivationByModel(t *testing.T) {
	for _, m := range mig.Models() {
		want, ok := switchActivation[m]
		if !ok {
			t.Errorf("%s: no expected activation: decide from NVIDIA's MIG user guide", m)
			continue
		}
		b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{m}})
		dev := device(t, b, 0)
		activation, err := dev.SetMIGMode(nvml.MIGDisabled)
		if err != nil || activation != want {
			t.Errorf("%s: SetMIGMode(disabled) = %s, %v; want %s", m, activation, err, want)
		}
		wantCurrent := nvml.MIGEnabled
		if want == nvml.Success {
			wantCurrent = nvml.MIGDisabled
		}
		if c, p, err := dev.MIGMode(); err != nil || c != wantCurrent || p != nvml.MIGDisabled {
			t.Errorf("%s: MIGMode = %s/%s, %v; want %s/Disabled", m, c, p, err, wantCurrent)
		}
	}
}

func device(t *testing.T, b *emulated.Backend, i int) nvml.Device {
	t.Helper()
	d, err := b.Device(i)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A GPU configured whole starts with MIG off, and every MIG call on it fails with
// ERROR_NOT_SUPPORTED; the other GPUs start in MIG mode, as before.
func TestWholeGPUFromConfig(t *testing.T) {
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB, mig.H100_80GB}, MIGDisabled: []int{1}})
	if c, p, err := device(t, b, 0).MIGMode(); err != nil || c != nvml.MIGEnabled || p != nvml.MIGEnabled {
		t.Errorf("GPU 0: MIGMode = %s/%s, %v; want Enabled/Enabled", c, p, err)
	}
	whole := device(t, b, 1)
	if c, p, err := whole.MIGMode(); err != nil || c != nvml.MIGDisabled || p != nvml.MIGDisabled {
		t.Errorf("GPU 1: MIGMode = %s/%s, %v; want Disabled/Disabled", c, p, err)
	}
	p := mig.H100_80GB.Profiles()[0]
	info := nvml.GPUInstanceProfileInfo{Profile: p.NVMLProfile}
	calls := map[string]func() error{
		"profile info": func() error { _, err := whole.GPUInstanceProfileInfo(p.NVMLProfile); return err },
		"placements":   func() error { _, err := whole.GPUInstancePossiblePlacements(info); return err },
		"create": func() error {
			_, err := whole.CreateGPUInstanceWithPlacement(info, nvml.Placement{Start: p.Starts[0], Size: p.MemorySlices})
			return err
		},
		"GPU instances": func() error { _, err := whole.GPUInstances(info); return err },
		"MIG devices":   func() error { _, err := whole.MIGDevices(); return err },
	}
	for name, call := range calls {
		if err := call(); nvml.ReturnOf(err) != nvml.ErrorNotSupported {
			t.Errorf("%s with MIG off: %v, want ERROR_NOT_SUPPORTED", name, err)
		}
	}
}

// The modes are in the state file: a restarted agent reads back a switch and a pending
// change, a reset on the restarted backend applies it, and a state file written before modes
// existed keeps the configured ones.
func TestModePersists(t *testing.T) {
	state := filepath.Join(t.TempDir(), "nvml.json")
	opts := emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB, mig.A100_40GB}, StateFile: state}
	b := newBackend(t, opts)
	for i := range 2 {
		if _, err := device(t, b, i).SetMIGMode(nvml.MIGDisabled); err != nil {
			t.Fatal(err)
		}
	}
	restarted := newBackend(t, opts)
	for _, tc := range []struct {
		gpu              int
		current, pending nvml.MIGMode
	}{
		{0, nvml.MIGDisabled, nvml.MIGDisabled},
		{1, nvml.MIGEnabled, nvml.MIGDisabled},
	} {
		if c, p, err := device(t, restarted, tc.gpu).MIGMode(); err != nil || c != tc.current || p != tc.pending {
			t.Errorf("GPU %d after a restart: MIGMode = %s/%s, %v; want %s/%s", tc.gpu, c, p, err, tc.current, tc.pending)
		}
	}
	if err := restarted.ResetGPU(1); err != nil {
		t.Fatal(err)
	}
	if c, _, err := device(t, newBackend(t, opts), 1).MIGMode(); err != nil || c != nvml.MIGDisabled {
		t.Errorf("GPU 1 after reset and restart: current %s, %v; want Disabled", c, err)
	}

	old := filepath.Join(t.TempDir(), "old.json")
	content := `{"seq": 0, "gpus": [{"uuid": "` + emulated.GPUUUID("n1", 0) + `", "model": "H100-80GB", "instances": []}]}`
	if err := os.WriteFile(old, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, disabled := range [][]int{nil, {0}} {
		want := nvml.MIGEnabled
		if disabled != nil {
			want = nvml.MIGDisabled
		}
		b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB}, StateFile: old, MIGDisabled: disabled})
		if c, p, err := device(t, b, 0).MIGMode(); err != nil || c != want || p != want {
			t.Errorf("old state file, MIGDisabled %v: MIGMode = %s/%s, %v; want %s", disabled, c, p, err, want)
		}
	}
}

// A reset is refused while a client holds the GPU or a process uses one of its MIG devices;
// otherwise it empties the GPU. A reboot applies a pending mode and ends every hold.
func TestResetAndReboot(t *testing.T) {
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.A30_24GB}})
	uuid, err := b.CreateInstance(0, "1g.6gb", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	b.SetInUse(uuid, true)
	if err := b.ResetGPU(0); !nvml.IsInUse(err) || len(b.Instances()) != 1 {
		t.Errorf("reset with a MIG device in use: %v, %d instances; want ERROR_IN_USE and the instance kept", err, len(b.Instances()))
	}
	b.SetInUse(uuid, false)
	if err := b.ResetGPU(0); err != nil || len(b.Instances()) != 0 || b.States()[0] != mig.EmptyGPU(mig.A30_24GB) {
		t.Errorf("reset: %v, instances %v; want an empty GPU", err, b.Instances())
	}
	dev := device(t, b, 0)
	if err := b.HoldGPU(0, true); err != nil {
		t.Fatal(err)
	}
	if activation, err := dev.SetMIGMode(nvml.MIGDisabled); err != nil || activation != nvml.ErrorInUse {
		t.Errorf("SetMIGMode while held = %s, %v; want activation ERROR_IN_USE", activation, err)
	}
	if err := b.ResetGPU(0); !nvml.IsInUse(err) {
		t.Errorf("reset while held: %v, want ERROR_IN_USE", err)
	}
	if err := b.Reboot(); err != nil {
		t.Fatal(err)
	}
	if c, p, err := dev.MIGMode(); err != nil || c != nvml.MIGDisabled || p != nvml.MIGDisabled {
		t.Errorf("after a reboot: MIGMode = %s/%s, %v; want Disabled/Disabled", c, p, err)
	}
	if err := b.ResetGPU(0); err != nil {
		t.Errorf("reset after a reboot (the hold ended): %v", err)
	}
	if err := b.HoldGPU(1, true); err == nil {
		t.Errorf("HoldGPU(1) on a one-GPU node succeeded")
	}
}

// SetMIGMode takes the switch latency, fails with an injected fault changing nothing, and
// refuses a mode NVML does not have.
func TestSetMIGModeLatencyAndFaults(t *testing.T) {
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB}, MIGModeLatency: 80 * time.Millisecond})
	dev := device(t, b, 0)
	start := time.Now()
	if _, err := dev.SetMIGMode(nvml.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("SetMIGMode took %s, want at least the 80ms latency", d)
	}
	b.InjectFault(emulated.OpSetMIGMode, nvml.ErrorNoPermission, 1)
	if _, err := dev.SetMIGMode(nvml.MIGDisabled); nvml.ReturnOf(err) != nvml.ErrorNoPermission {
		t.Errorf("SetMIGMode with a fault: %v, want ERROR_NO_PERMISSION", err)
	}
	if _, err := dev.SetMIGMode(nvml.MIGMode(2)); nvml.ReturnOf(err) != nvml.ErrorInvalidArgument {
		t.Errorf("SetMIGMode(2): %v, want ERROR_INVALID_ARGUMENT", err)
	}
	if c, p, err := dev.MIGMode(); err != nil || c != nvml.MIGEnabled || p != nvml.MIGEnabled {
		t.Errorf("after the failed calls: MIGMode = %s/%s, %v; want Enabled/Enabled", c, p, err)
	}
	if got := b.Calls(emulated.OpSetMIGMode); got != 3 {
		t.Errorf("Calls(%s) = %d, want 3", emulated.OpSetMIGMode, got)
	}
}

// The emulated topology, written out: pairs (0,1), (2,3)... are NVLink peers behind one
// switch; the pairs are split over two NUMA nodes, the first half of them on node 0.
func TestTopology(t *testing.T) {
	const (
		P = nvml.TopologySingle // NVLink pair
		N = nvml.TopologyNode   // same NUMA node
		S = nvml.TopologySystem // across NUMA nodes
	)
	for _, tc := range []struct {
		n    int
		want [][]nvml.TopologyLevel // the diagonal is not asked
	}{
		{8, [][]nvml.TopologyLevel{
			{0, P, N, N, S, S, S, S},
			{P, 0, N, N, S, S, S, S},
			{N, N, 0, P, S, S, S, S},
			{N, N, P, 0, S, S, S, S},
			{S, S, S, S, 0, P, N, N},
			{S, S, S, S, P, 0, N, N},
			{S, S, S, S, N, N, 0, P},
			{S, S, S, S, N, N, P, 0},
		}},
		{6, [][]nvml.TopologyLevel{
			{0, P, N, N, S, S},
			{P, 0, N, N, S, S},
			{N, N, 0, P, S, S},
			{N, N, P, 0, S, S},
			{S, S, S, S, 0, P},
			{S, S, S, S, P, 0},
		}},
		{3, [][]nvml.TopologyLevel{
			{0, P, S},
			{P, 0, S},
			{S, S, 0},
		}},
		{2, [][]nvml.TopologyLevel{{0, P}, {P, 0}}},
	} {
		models := make([]mig.Model, tc.n)
		for i := range models {
			models[i] = mig.H100_94GB
		}
		b := newBackend(t, emulated.Options{Node: "n1", GPUs: models})
		got := make([][]nvml.TopologyLevel, tc.n)
		for i := range tc.n {
			got[i] = make([]nvml.TopologyLevel, tc.n)
			for j := range tc.n {
				if i == j {
					continue
				}
				level, err := device(t, b, i).TopologyCommonAncestor(device(t, b, j))
				if err != nil {
					t.Fatalf("%d GPUs: TopologyCommonAncestor(%d, %d): %v", tc.n, i, j, err)
				}
				nvlink, err := device(t, b, i).NVLinkPeer(device(t, b, j))
				if err != nil || nvlink != (tc.want[i][j] == P) {
					t.Errorf("%d GPUs: NVLinkPeer(%d, %d) = %t, %v; want %t", tc.n, i, j, nvlink, err, tc.want[i][j] == P)
				}
				got[i][j] = level
			}
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%d GPUs: topology (-want +got):\n%s", tc.n, d)
		}
	}
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB, mig.H100_80GB}})
	other := newBackend(t, emulated.Options{Node: "n2", GPUs: []mig.Model{mig.H100_80GB, mig.H100_80GB}})
	if _, err := device(t, b, 0).TopologyCommonAncestor(device(t, b, 0)); nvml.ReturnOf(err) != nvml.ErrorInvalidArgument {
		t.Errorf("topology of a GPU to itself: %v, want ERROR_INVALID_ARGUMENT", err)
	}
	if _, err := device(t, b, 0).NVLinkPeer(device(t, other, 1)); nvml.ReturnOf(err) != nvml.ErrorInvalidArgument {
		t.Errorf("NVLink to another node's GPU: %v, want ERROR_INVALID_ARGUMENT", err)
	}
}

// ReadLinks reads the emulated topology pair by pair (emulated.Link, itself checked against
// the written-out matrices above), reads a pair NVML cannot answer for as the farthest link,
// and returns any other error.
func TestReadLinks(t *testing.T) {
	models := []mig.Model{mig.H100_80GB, mig.H100_80GB, mig.H100_80GB, mig.H100_80GB}
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: models})
	devs := make([]nvml.Device, len(models))
	for i := range devs {
		devs[i] = device(t, b, i)
	}
	links, err := nvml.ReadLinks(devs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range devs {
		for j := range devs {
			var want nvml.Link
			if i != j {
				want.Level, want.NVLink = emulated.Link(len(devs), i, j)
			}
			if links[i][j] != want {
				t.Errorf("links[%d][%d] = %+v, want %+v", i, j, links[i][j], want)
			}
		}
	}
	b.InjectFault(emulated.OpTopology, nvml.ErrorNotSupported, 1)
	b.InjectFault(emulated.OpP2PStatus, nvml.ErrorNotSupported, 1)
	if links, err = nvml.ReadLinks(devs); err != nil || links[0][1] != (nvml.Link{Level: nvml.TopologySystem}) || links[1][0] != (nvml.Link{Level: nvml.TopologySingle, NVLink: true}) {
		t.Errorf("ReadLinks with the first pair unsupported: %v, links[0][1] %+v, links[1][0] %+v", err, links[0][1], links[1][0])
	}
	b.InjectFault(emulated.OpP2PStatus, nvml.ErrorGPUIsLost, 1)
	if _, err := nvml.ReadLinks(devs); nvml.ReturnOf(err) != nvml.ErrorGPUIsLost {
		t.Errorf("ReadLinks with a lost GPU: %v, want ERROR_GPU_IS_LOST", err)
	}
}

// From outside the agent's process (e2e on the node): a control file holds, releases and
// resets GPUs at the backend's next event wait, and ReadStateGPUs reads the modes back; a
// crash right after a switch leaves it in the state file for the restarted agent.
func TestModeFromOutside(t *testing.T) {
	state := filepath.Join(t.TempDir(), "nvml.json")
	opts := emulated.Options{Node: "n1", GPUs: []mig.Model{mig.A100_80GB, mig.H200_141GB}, StateFile: state}
	b := newBackend(t, opts)
	set, err := b.EventSetCreate()
	if err != nil {
		t.Fatal(err)
	}
	apply := func(c emulated.Control) {
		t.Helper()
		if err := emulated.SendControl(state, c); err != nil {
			t.Fatal(err)
		}
		if _, err := set.Wait(50 * time.Millisecond); !nvml.IsTimeout(err) {
			t.Fatalf("event wait applying %+v: %v", c, err)
		}
		if emulated.ControlPending(state) {
			t.Fatalf("control %+v not applied", c)
		}
	}
	apply(emulated.Control{Hold: []int{0}})
	a100 := device(t, b, 0)
	if activation, err := a100.SetMIGMode(nvml.MIGDisabled); err != nil || activation != nvml.ErrorInUse {
		t.Errorf("SetMIGMode while held by control = %s, %v; want activation ERROR_IN_USE", activation, err)
	}
	apply(emulated.Control{Release: []int{0}, Reset: []int{0}})
	b.CrashAfter(emulated.OpSetMIGMode, 1, nil)
	if _, err := device(t, b, 1).SetMIGMode(nvml.MIGDisabled); err != nil {
		t.Fatalf("SetMIGMode at the crash point: %v", err)
	}
	if !b.Crashed() {
		t.Fatal("the crash point did not fire")
	}
	got, err := emulated.ReadStateGPUs(state)
	if err != nil {
		t.Fatal(err)
	}
	want := []emulated.StateGPU{
		{UUID: emulated.GPUUUID("n1", 0), Model: mig.A100_80GB, MIGMode: nvml.MIGDisabled, PendingMIGMode: nvml.MIGDisabled, ModeRecorded: true},
		{UUID: emulated.GPUUUID("n1", 1), Model: mig.H200_141GB, MIGMode: nvml.MIGDisabled, PendingMIGMode: nvml.MIGDisabled, ModeRecorded: true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ReadStateGPUs (-want +got):\n%s", d)
	}
	if c, _, err := device(t, newBackend(t, opts), 1).MIGMode(); err != nil || c != nvml.MIGDisabled {
		t.Errorf("after the crash and a restart: current %s, %v; want Disabled", c, err)
	}
}
