package mig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustProfile(t testing.TB, m Model, name string) Profile {
	t.Helper()
	p, err := m.Profile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewGPUState(t *testing.T) {
	cases := []struct {
		name    string
		in      []Instance
		wantErr string
	}{
		{"empty", nil, ""},
		{"4g+3g", []Instance{{"4g.40gb", Placement{0, 4}}, {"3g.40gb", Placement{4, 4}}}, ""},
		{"seven 1g", []Instance{{"1g.10gb", Placement{0, 1}}, {"1g.10gb", Placement{1, 1}}, {"1g.10gb", Placement{2, 1}},
			{"1g.10gb", Placement{3, 1}}, {"1g.10gb", Placement{4, 1}}, {"1g.10gb", Placement{5, 1}}, {"1g.10gb.me", Placement{6, 1}}}, ""},
		{"overlap", []Instance{{"3g.40gb", Placement{0, 4}}, {"2g.20gb", Placement{2, 2}}}, "overlaps"},
		{"illegal start", []Instance{{"3g.40gb", Placement{2, 4}}}, "not a legal placement"},
		{"wrong size", []Instance{{"3g.40gb", Placement{0, 3}}}, "not a legal placement"},
		{"1g at slot 7", []Instance{{"1g.10gb", Placement{7, 1}}}, "not a legal placement"},
		{"two +me", []Instance{{"1g.10gb+me", Placement{0, 1}}, {"1g.10gb.me", Placement{3, 1}}}, "count limit"},
		{"unknown profile", []Instance{{"3g.20gb", Placement{0, 4}}}, "not a MIG profile of H100-80GB"},
		{"duplicate", []Instance{{"7g.80gb", Placement{0, 8}}, {"7g.80gb", Placement{0, 8}}}, "already taken"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewGPUState(H100_80GB, tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want []Instance
			for _, in := range tc.in {
				want = append(want, Instance{canonicalProfileName(in.Profile), in.Placement})
			}
			if diff := cmp.Diff(want, s.Instances()); diff != "" {
				t.Errorf("instances (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := NewGPUState(0, nil); err == nil {
		t.Error("model 0 accepted")
	}
}

func TestTakeRelease(t *testing.T) {
	p3 := mustProfile(t, H100_80GB, "3g.40gb")
	s, err := EmptyGPU(H100_80GB).Take(p3, Placement{4, 4})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Placement{{0, 4}}, s.Candidates(p3)); diff != "" {
		t.Error(diff)
	}
	if _, err := s.Release(p3, Placement{0, 4}); err == nil {
		t.Error("released an instance that does not exist")
	}
	back, err := s.Release(p3, Placement{4, 4})
	if err != nil || back != EmptyGPU(H100_80GB) {
		t.Errorf("release = %v, %v", back, err)
	}
	// A profile of another model is rejected, not misread.
	a, _ := A100_40GB.Profile("3g.20gb")
	if _, err := s.Take(a, Placement{0, 4}); err == nil {
		t.Error("took an A100 profile on an H100")
	}
}

func TestWhyNot(t *testing.T) {
	s, _ := NewGPUState(H100_80GB, []Instance{{"1g.10gb", Placement{0, 1}}, {"1g.10gb+me", Placement{5, 1}}})
	cases := map[string]string{
		"3g.40gb":    "no free block of 4 memory slices",
		"1g.10gb+me": "count limit reached (1 of 1)",
		"2g.20gb":    "",
	}
	for name, want := range cases {
		got := s.WhyNot(mustProfile(t, H100_80GB, name))
		if (want == "" && got != "") || !strings.Contains(got, want) {
			t.Errorf("WhyNot(%s) = %q, want %q", name, got, want)
		}
	}
}

// A 1g on an empty GPU must not land where it blocks a 4g; after a 4g, it must not block the
// 3g at 4 when another start exists.
func TestSlicerStartChoice(t *testing.T) {
	for _, m := range []Model{A100_40GB, H100_80GB, H200_141GB, B200_180GB} {
		ps := m.Profiles()
		one, four, three := ps[0], ps[5], ps[4]
		node := Node{GPUs: []GPU{{State: EmptyGPU(m), Usable: true}}}
		req := MustRequest(RequestItem{Profile: one.Name, Count: 1})
		as, err := Place(node, req)
		if err != nil {
			t.Fatal(err)
		}
		after, _ := node.GPUs[0].State.Take(as[0].Profile, as[0].Placement)
		if !after.Fits(four) || as[0].Placement.Start < 4 {
			t.Errorf("%s: 1g on an empty GPU at %v blocks the 4g", m, as[0].Placement)
		}
		// GPU with a 3g at 0: a 1g goes on it (best fit), not on the empty GPU.
		used, _ := EmptyGPU(m).Take(three, Placement{0, 4})
		node = Node{GPUs: []GPU{{State: EmptyGPU(m), Usable: true}, {State: used, Usable: true}}}
		as, err = Place(node, req)
		if err != nil || as[0].GPU != 1 {
			t.Errorf("%s: 1g went to %+v, %v; want the GPU in use", m, as, err)
		}
	}
}

func TestObstacle(t *testing.T) {
	state := func(in ...Instance) GPUState {
		t.Helper()
		s, err := NewGPUState(H100_80GB, in)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name    string
		state   GPUState
		profile Profile
		want    Obstacle
	}{
		{"empty", EmptyGPU(H100_80GB), mustProfile(t, H100_80GB, "3g.40gb"), NoObstacle},
		// 6 memory slices and 5 compute slices free, but neither legal 3g start (0, 4) is.
		{"fragmented", state(Instance{"1g.10gb", Placement{1, 1}}, Instance{"1g.10gb", Placement{5, 1}}),
			mustProfile(t, H100_80GB, "3g.40gb"), ObstacleFragmented},
		{"compute full", state(Instance{"4g.40gb", Placement{0, 4}}, Instance{"2g.20gb", Placement{4, 2}}),
			mustProfile(t, H100_80GB, "3g.40gb"), ObstacleFull},
		{"memory full", state(Instance{"1g.20gb", Placement{0, 2}}, Instance{"1g.20gb", Placement{2, 2}},
			Instance{"1g.20gb", Placement{4, 2}}, Instance{"1g.20gb", Placement{6, 2}}),
			mustProfile(t, H100_80GB, "2g.20gb"), ObstacleFull},
		{"count limit", state(Instance{"1g.10gb+me", Placement{5, 1}}), mustProfile(t, H100_80GB, "1g.10gb+me"), ObstacleCountLimit},
		{"other model", EmptyGPU(H100_80GB), mustProfile(t, A100_40GB, "3g.20gb"), ObstacleModel},
		{"no model", GPUState{}, mustProfile(t, H100_80GB, "3g.40gb"), ObstacleModel},
	}
	for _, c := range cases {
		if got := c.state.Obstacle(c.profile); got != c.want {
			t.Errorf("%s: Obstacle(%s) = %q, want %q", c.name, c.profile.Name, got, c.want)
		}
		if why := c.state.WhyNot(c.profile); (why == "") != (c.want == NoObstacle) {
			t.Errorf("%s: WhyNot(%s) = %q disagrees with Obstacle %q", c.name, c.profile.Name, why, c.want)
		}
	}
}

func TestExplain(t *testing.T) {
	full, _ := NewGPUState(H100_80GB, []Instance{{"4g.40gb", Placement{0, 4}}, {"2g.20gb", Placement{4, 2}}})
	node := Node{GPUs: []GPU{{State: full, Usable: true}, {State: EmptyGPU(H100_80GB), Usable: false}}}
	msg := Explain(node, MustRequest(RequestItem{Profile: "3g.40gb", Count: 1}))
	for _, want := range []string{"3g.40gb does not fit on any of 2 GPUs", "gpu 0 (H100-80GB): only 1 compute slices free", "gpu 1 (H100-80GB): not usable"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Explain = %q, missing %q", msg, want)
		}
	}
	if msg := Explain(node, MustRequest(RequestItem{Profile: "1g.10gb", Count: 1})); msg != "" {
		t.Errorf("Explain of a fitting request = %q", msg)
	}
}
