package config

import "testing"

func TestFeatureGatesFlag(t *testing.T) {
	if got := FeatureGatesFlag(); got != "NominatedNodeNameForExpectation=false" {
		t.Fatalf("FeatureGatesFlag() = %q", got)
	}
}
