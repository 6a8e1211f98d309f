package mig

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// at is an occupant: profile at start+size, held by holder ("" for none).
func at(profile string, start, size int, holder string) Occupant {
	return Occupant{Instance: Instance{Profile: profile, Placement: Placement{start, size}}, Holder: holder}
}

func TestOccupancy(t *testing.T) {
	cases := []struct {
		name      string
		model     Model
		occupants []Occupant
		misfits   Misfits
		// want are the instances of the state (NVIDIA spelling, placement order); nil with an error.
		want []Instance
		// wantFault and wantAt are the error's fault and occupant ("" when none).
		wantFault OccupancyFault
		wantAt    int
		// wantErr is part of the error's text.
		wantErr string
	}{
		{name: "no occupant: an empty GPU", model: H100_80GB},
		{
			name: "a full GPU: one 7g instance and the claim it realizes count once", model: H100_80GB,
			occupants: []Occupant{at("7g.80gb", 0, 8, ""), at("7g.80gb", 0, 8, "pod-a")},
			want:      []Instance{{"7g.80gb", Placement{0, 8}}},
		},
		{
			name: "a full GPU of seven 1g, the last in the .me spelling", model: H100_80GB,
			occupants: []Occupant{at("1g.10gb", 0, 1, ""), at("1g.10gb", 1, 1, ""), at("1g.10gb", 2, 1, ""), at("1g.10gb", 3, 1, ""),
				at("1g.10gb", 4, 1, ""), at("1g.10gb", 5, 1, ""), at("1g.10gb.me", 6, 1, "")},
			want: []Instance{{"1g.10gb", Placement{0, 1}}, {"1g.10gb", Placement{1, 1}}, {"1g.10gb", Placement{2, 1}}, {"1g.10gb", Placement{3, 1}},
				{"1g.10gb", Placement{4, 1}}, {"1g.10gb", Placement{5, 1}}, {"1g.10gb+me", Placement{6, 1}}},
		},
		{
			name: "an orphaned or foreign instance (no claim) occupies beside the claims", model: H100_80GB,
			occupants: []Occupant{at("2g.20gb", 0, 2, ""), at("3g.40gb", 4, 4, "pod-a"), at("3g.40gb", 4, 4, "")},
			want:      []Instance{{"2g.20gb", Placement{0, 2}}, {"3g.40gb", Placement{4, 4}}},
		},
		{
			name: "a claim not realized yet (an allocation still Pending, or released with its instance gone) occupies its slot", model: H100_80GB,
			occupants: []Occupant{at("1g.10gb", 6, 1, "pod-a")},
			want:      []Instance{{"1g.10gb", Placement{6, 1}}},
		},
		{
			name: "an instance left after its claim went (a released allocation's, PendingDelete) still occupies", model: A30_24GB,
			occupants: []Occupant{at("2g.12gb", 0, 2, "")},
			want:      []Instance{{"2g.12gb", Placement{0, 2}}},
		},
		{
			name: "one holder listing its slot twice (an allocation and its reservation) counts once", model: H100_80GB,
			occupants: []Occupant{at("3g.40gb", 0, 4, "pod-a"), at("3g.40gb", 0, 4, "pod-a"), at("3g.40gb", 0, 4, "")},
			want:      []Instance{{"3g.40gb", Placement{0, 4}}},
		},
		{
			name: "two holders of one slot: a double allocation", model: H100_80GB,
			occupants: []Occupant{at("3g.40gb", 0, 4, "pod-a"), at("1g.10gb", 4, 1, "pod-b"), at("3g.40gb", 0, 4, "pod-c")},
			wantFault: FaultHeldTwice, wantAt: 2, wantErr: "instance 2: 3g.40gb at {start 0, size 4} is held by pod-a and by pod-c",
		},
		{
			name: "two holders of one slot, skipping misfits: the slot once", model: H100_80GB, misfits: SkipMisfits,
			occupants: []Occupant{at("3g.40gb", 0, 4, "pod-a"), at("3g.40gb", 0, 4, "pod-c")},
			want:      []Instance{{"3g.40gb", Placement{0, 4}}},
		},
		{
			name: "a claim overlapping an instance", model: H100_80GB,
			occupants: []Occupant{at("7g.80gb", 0, 8, ""), at("3g.40gb", 4, 4, "pod-a")},
			wantFault: FaultDoesNotFit, wantAt: 1,
			wantErr: "instance 1: cannot create 3g.40gb at {start 4, size 4} on H100-80GB: overlaps an existing instance",
		},
		{
			name: "the index among distinct occupants is NewGPUState's", model: H100_80GB,
			occupants: []Occupant{at("1g.10gb", 0, 1, ""), at("1g.10gb", 0, 1, "pod-a"), at("4g.40gb", 0, 4, "pod-b")},
			wantFault: FaultDoesNotFit, wantAt: 2, wantErr: "instance 1: cannot create 4g.40gb",
		},
		{
			name: "over the count limit of +me profiles", model: H100_80GB,
			occupants: []Occupant{at("1g.10gb+me", 0, 1, "pod-a"), at("1g.10gb.me", 3, 1, "pod-b")},
			wantFault: FaultDoesNotFit, wantAt: 1, wantErr: "count limit",
		},
		{
			name: "an illegal placement", model: H100_80GB,
			occupants: []Occupant{at("3g.40gb", 2, 4, "")},
			wantFault: FaultDoesNotFit, wantAt: 0, wantErr: "instance 0: placement {start 2, size 4} is not a legal placement",
		},
		{
			name: "a profile of another model", model: H100_80GB,
			occupants: []Occupant{at("1g.10gb", 0, 1, ""), at("3g.20gb", 4, 4, "")},
			wantFault: FaultDoesNotFit, wantAt: 1, wantErr: `instance 1: profile "3g.20gb" is not a MIG profile of H100-80GB`,
		},
		{
			name: "a name with space around it, as ParseProfileName reads it", model: H100_80GB,
			occupants: []Occupant{at(" 1g.10gb.me ", 0, 1, ""), at("1g.10gb+me", 0, 1, "pod-a")},
			want:      []Instance{{"1g.10gb+me", Placement{0, 1}}},
		},
		{
			name: "no MIG profile name: the name's error alone", model: H100_80GB,
			occupants: []Occupant{at("1g.10gb", 0, 1, ""), at("big", 4, 4, "")},
			wantFault: FaultUnknownProfile, wantAt: 1, wantErr: `"big" is not a MIG profile name`,
		},
		{
			name: "the DRA shape: instances first, then held devices in name order; what does not fit is left out", model: H100_80GB, misfits: SkipMisfits,
			occupants: []Occupant{at("4g.40gb", 0, 4, ""), at("nonsense", 0, 1, ""),
				at("1g.10gb", 0, 1, "claim-a"), at("3g.40gb", 4, 4, "claim-b"), at("1g.10gb", 4, 1, "claim-c"), at("4g.40gb", 0, 4, "claim-d")},
			want: []Instance{{"4g.40gb", Placement{0, 4}}, {"3g.40gb", Placement{4, 4}}},
		},
		{
			name: "the DRA shape: the order decides which of two overlapping devices counts", model: H100_80GB, misfits: SkipMisfits,
			occupants: []Occupant{at("4g.40gb", 0, 4, ""), at("1g.10gb", 4, 1, "claim-c"), at("3g.40gb", 4, 4, "claim-b")},
			want:      []Instance{{"4g.40gb", Placement{0, 4}}, {"1g.10gb", Placement{4, 1}}},
		},
		{
			name: "an A30 full with 4g", model: A30_24GB,
			occupants: []Occupant{at("4g.24gb", 0, 4, "pod-a"), at("4g.24gb", 0, 4, "")},
			want:      []Instance{{"4g.24gb", Placement{0, 4}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Occupancy(tc.model, tc.occupants, tc.misfits)
			if tc.wantErr != "" {
				var oe *OccupancyError
				if !errors.As(err, &oe) {
					t.Fatalf("err = %v, want an *OccupancyError", err)
				}
				if oe.Fault != tc.wantFault || oe.Occupant != tc.wantAt {
					t.Errorf("fault %s at occupant %d, want %s at %d", oe.Fault, oe.Occupant, tc.wantFault, tc.wantAt)
				}
				if got := err.Error(); !strings.Contains(got, tc.wantErr) {
					t.Errorf("err = %q, want it to contain %q", got, tc.wantErr)
				}
				if s != (GPUState{}) {
					t.Errorf("state %v with an error, want the zero GPUState", s.Instances())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Model() != tc.model {
				t.Errorf("model %v, want %v", s.Model(), tc.model)
			}
			if diff := cmp.Diff(tc.want, s.Instances()); diff != "" {
				t.Errorf("instances (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOccupancyUnknownModel(t *testing.T) {
	for _, m := range []Misfits{FailOnMisfit, SkipMisfits} {
		if s, err := Occupancy(0, []Occupant{at("1g.10gb", 0, 1, "")}, m); err == nil || s != (GPUState{}) {
			t.Errorf("misfits %d: model 0 gave %v, %v; want the zero state and an error", m, s, err)
		}
	}
}

// Without holders and with FailOnMisfit, Occupancy is NewGPUState of the distinct occupants:
// the same state, or the same error word for word. With SkipMisfits it is what taking each
// occupant that fits, in order, gives. Random occupants of every model, legal and not.
func TestOccupancyIsNewGPUStateOfTheDistinct(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 1))
	for _, m := range Models() {
		profiles := m.Profiles()
		for range 2000 {
			var occ []Occupant
			var distinct []Instance
			have := map[Instance]bool{}
			for range r.IntN(9) {
				p := profiles[r.IntN(len(profiles))]
				pl := Placement{Start: p.Starts[r.IntN(len(p.Starts))], Size: p.MemorySlices}
				if r.IntN(10) == 0 {
					pl.Start = r.IntN(8)
				}
				occ = append(occ, at(p.Name, pl.Start, pl.Size, ""))
				if in := (Instance{p.Name, pl}); !have[in] {
					have[in] = true
					distinct = append(distinct, in)
				}
			}
			want, wantErr := NewGPUState(m, distinct)
			got, err := Occupancy(m, occ, FailOnMisfit)
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) || got != want {
				t.Fatalf("%s %v: Occupancy = %v, %v; NewGPUState = %v, %v", m, occ, got.Instances(), err, want.Instances(), wantErr)
			}
			skip := EmptyGPU(m)
			for _, in := range distinct {
				if next, err := skip.Take(mustProfile(t, m, in.Profile), in.Placement); err == nil {
					skip = next
				}
			}
			if got, err := Occupancy(m, occ, SkipMisfits); err != nil || got != skip {
				t.Fatalf("%s %v: SkipMisfits = %v, %v; want %v", m, occ, got.Instances(), err, skip.Instances())
			}
		}
	}
}

// The snapshot rebuilds a node's occupancy on every change: up to 16 occupants cost no
// allocation.
func TestOccupancyAllocatesNothing(t *testing.T) {
	occ := []Occupant{at("3g.40gb", 0, 4, "pod-a"), at("1g.10gb", 4, 1, "pod-b"), at("1g.10gb", 5, 1, "pod-c"),
		at("3g.40gb", 0, 4, ""), at("1g.10gb", 4, 1, "")}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := Occupancy(H100_80GB, occ, FailOnMisfit); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Occupancy allocates %.0f times per call, want 0", n)
	}
}

func BenchmarkOccupancy(b *testing.B) {
	occ := []Occupant{at("3g.40gb", 0, 4, "pod-a"), at("1g.10gb", 4, 1, "pod-b"), at("1g.10gb", 6, 1, "pod-c"),
		at("3g.40gb", 0, 4, ""), at("1g.10gb", 4, 1, ""), at("1g.10gb", 5, 1, "")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Occupancy(H100_80GB, occ, FailOnMisfit); err != nil {
			b.Fatal(err)
		}
	}
}
