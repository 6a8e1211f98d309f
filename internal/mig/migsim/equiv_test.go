package migsim

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Transitional: the policies, PackStatic and StaticOrder answer as internal/mig's did.
func TestPoliciesAsBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for c := 0; c < 20000; c++ {
		models := caseModels(c)
		if c%5 == 4 {
			models = []mig.Model{mig.H100_80GB, mig.A100_40GB}
		}
		nodes, _ := randomCluster(rng, models, 1, 1+rng.IntN(8), 0)
		m := models[rng.IntN(len(models))]
		profs := m.Profiles()
		var items []mig.RequestItem
		for i := 1 + rng.IntN(3); i > 0; i-- {
			items = append(items, mig.RequestItem{Profile: profs[rng.IntN(len(profs))].Name, Count: 1 + rng.IntN(2)})
		}
		req := mig.MustRequest(items...)
		for k, old := range []mig.PolicyKind{mig.Slicer, mig.FirstFit, mig.DASLike} {
			s, ok := PolicyKind(k).Score(nodes[0], req)
			ws, wok := old.Score(nodes[0], req)
			if s != ws || ok != wok {
				t.Fatalf("case %d %s: score %d %v, want %d %v", c, old.Name(), s, ok, ws, wok)
			}
			as, err := PolicyKind(k).Place(nodes[0], req)
			was, werr := old.Place(nodes[0], req)
			if !reflect.DeepEqual(as, was) || (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
				t.Fatalf("case %d %s: place %v %v, want %v %v", c, old.Name(), as, err, was, werr)
			}
		}
		var batch []mig.RequestItem
		for i := 1 + rng.IntN(6); i > 0; i-- {
			batch = append(batch, mig.RequestItem{Profile: profs[rng.IntN(len(profs))].Name, Count: rng.IntN(5)})
		}
		got, err := StaticOrder(m, batch)
		want, werr := mig.StaticOrder(m, batch)
		if !reflect.DeepEqual(got, want) || (err == nil) != (werr == nil) {
			t.Fatalf("case %d: order %v %v, want %v %v", c, got, err, want, werr)
		}
		if c%10 == 0 {
			for k, old := range []mig.PolicyKind{mig.Slicer, mig.FirstFit, mig.DASLike} {
				u, err := PackStatic(PolicyKind(k), m, batch)
				wu, werr := mig.PackStatic(old, m, batch)
				if u != wu || (err == nil) != (werr == nil) {
					t.Fatalf("case %d %s: pack %d %v, want %d %v", c, old.Name(), u, err, wu, werr)
				}
			}
		}
	}
	if _, err := StaticOrder(mig.H100_80GB, []mig.RequestItem{{Profile: "1g.10gb", Count: -1}}); err == nil {
		t.Error("negative count accepted")
	}
}
