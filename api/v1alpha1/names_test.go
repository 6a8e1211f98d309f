package v1alpha1_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func TestAllocationName(t *testing.T) {
	long := strings.Repeat("a", 250) + ".b"
	cases := map[string]struct {
		pod, uid string
		index    int32
		want     string
	}{
		"short":              {"train", "5F0C6D4E-0000-4000", 2, "train-5f0c6d4e-2"},
		"truncated, trimmed": {strings.Repeat("x", 242) + "-.y", "abcdef0123", 0, strings.Repeat("x", 242) + "-abcdef01-0"},
		"long":               {long, "abcdef0123", 15, ""},
	}
	for name, tc := range cases {
		got := slicerv1alpha1.AllocationName(tc.pod, tc.uid, tc.index)
		if tc.want != "" && got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("%s: %q is not a DNS-1123 subdomain: %v", name, got, errs)
		}
	}
}
