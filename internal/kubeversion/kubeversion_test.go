package kubeversion

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/version"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		info    *version.Info
		want    Version
		wantErr bool
	}{
		{name: "upstream", info: &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}, want: Version{Minor{1, 37}, "v1.37.2"}},
		{name: "distribution suffix", info: &version.Info{Major: "1", Minor: "36+", GitVersion: "v1.36.3+k3s1"}, want: Version{Minor{1, 36}, "v1.36.3+k3s1"}},
		{name: "pre-release", info: &version.Info{Major: "1", Minor: "38", GitVersion: "v1.38.0-alpha.1"}, want: Version{Minor{1, 38}, "v1.38.0-alpha.1"}},
		{name: "fields only", info: &version.Info{Major: "1", Minor: "35+"}, want: Version{Minor{1, 35}, "v1.35"}},
		{name: "garbage", info: &version.Info{Major: "x", Minor: "y", GitVersion: "z"}, wantErr: true},
		{name: "nil", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.info)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSupportedWindow(t *testing.T) {
	for _, tc := range []struct {
		m    Minor
		want bool
	}{
		{Minor{1, 34}, false}, {Minor{1, 35}, true}, {Minor{1, 36}, true}, {Minor{1, 37}, true}, {Minor{1, 38}, false}, {Minor{2, 36}, false},
	} {
		if got := IsSupported(tc.m); got != tc.want {
			t.Errorf("IsSupported(%s) = %v, want %v", tc.m, got, tc.want)
		}
	}
	if got := SupportedRange(); got != "1.35 to 1.37" {
		t.Errorf("SupportedRange() = %q", got)
	}
	for i := 1; i < len(Supported); i++ {
		if !Supported[i-1].Less(Supported[i]) {
			t.Errorf("Supported not oldest first at %d: %v", i, Supported)
		}
	}
}

func TestOpenShiftVersionsFollowTheSupportedWindow(t *testing.T) {
	saved, savedReleases := Supported, OpenShiftReleases
	t.Cleanup(func() { Supported, OpenShiftReleases = saved, savedReleases })
	OpenShiftReleases = map[Minor]string{{1, 34}: "4.21", {1, 35}: "4.22", {1, 36}: "5.0"}
	for _, tc := range []struct {
		supported []Minor
		want      string
	}{
		{[]Minor{{1, 35}, {1, 36}, {1, 37}}, "v4.22-v5.0"},
		{[]Minor{{1, 34}, {1, 35}}, "v4.21-v4.22"},
		{[]Minor{{1, 36}, {1, 37}, {1, 38}}, "v5.0-v5.0"},
	} {
		Supported = tc.supported
		if got := OpenShiftVersions(); got != tc.want {
			t.Errorf("OpenShiftVersions() with %v = %q, want %q", tc.supported, got, tc.want)
		}
	}
	Supported = []Minor{{1, 37}, {1, 38}}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("OpenShiftVersions() with no OpenShift release in the window did not panic")
			}
		}()
		OpenShiftVersions()
	}()
	Supported = []Minor{{1, 35}, {1, 37}}
	if got := MinKubeVersion(); got != "1.35.0" {
		t.Errorf("MinKubeVersion() = %q, want 1.35.0", got)
	}
}
