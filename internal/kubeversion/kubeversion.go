// Package kubeversion parses the Kubernetes version an apiserver reports and
// holds the window of minors Slicer supports. Pure: values in, values out.
package kubeversion

import (
	"fmt"
	"strconv"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/version"
)

// Minor is a Kubernetes minor release, e.g. 1.37.
type Minor struct {
	Major int
	Minor int
}

// String is "1.37".
func (m Minor) String() string { return strconv.Itoa(m.Major) + "." + strconv.Itoa(m.Minor) }

// Less orders minors by release.
func (m Minor) Less(o Minor) bool {
	if m.Major != o.Major {
		return m.Major < o.Major
	}
	return m.Minor < o.Minor
}

// Supported are the minors Slicer ships a scheduler build for, oldest first.
// The secondary scheduler embeds kube-scheduler, and a kube-scheduler of
// minor N is only supported against apiservers of minor N and N+1, so every
// minor needs its own build (docs/design/k8s-minors-operator.md).
var Supported = []Minor{{1, 35}, {1, 36}, {1, 37}}

// IsSupported reports whether m is in Supported.
func IsSupported(m Minor) bool {
	for _, s := range Supported {
		if s == m {
			return true
		}
	}
	return false
}

// SupportedRange is "1.35 to 1.37".
func SupportedRange() string {
	return Supported[0].String() + " to " + Supported[len(Supported)-1].String()
}

// OpenShiftReleases are the OpenShift releases built on a supported
// Kubernetes minor, where one is published (docs/design/k8s-minors-operator.md,
// support matrix). A supported minor without one (1.37 in November 2026) has
// no entry until Red Hat ships it.
var OpenShiftReleases = map[Minor]string{{1, 35}: "4.22", {1, 36}: "5.0"}

// OpenShiftVersions is the bundle's com.redhat.openshift.versions value: the
// inclusive range of the OpenShift releases built on a supported minor
// ("v4.22-v5.0"), so catalogs of newer OpenShift releases, whose apiserver
// the operator would refuse, do not list the bundle. It panics when no
// supported minor has an OpenShift release: the bundle would be for none.
func OpenShiftVersions() string {
	var first, last string
	for _, m := range Supported {
		if r, ok := OpenShiftReleases[m]; ok {
			if first == "" {
				first = r
			}
			last = r
		}
	}
	if first == "" {
		panic("kubeversion: no supported Kubernetes minor has an OpenShift release")
	}
	return "v" + first + "-v" + last
}

// MinKubeVersion is the CSV's spec.minKubeVersion: the oldest supported minor, patch 0.
func MinKubeVersion() string { return Supported[0].String() + ".0" }

// Version is what an apiserver reported about itself.
type Version struct {
	Minor
	// GitVersion is the full version as reported, e.g. v1.37.2 or
	// v1.36.3+k3s1; for messages.
	GitVersion string
}

// Parse reads the apiserver's /version answer. GitVersion is preferred (it
// is semantic on every distribution seen); the major and minor fields are
// the fallback, with the "+" some providers append (e.g. "36+") removed.
func Parse(info *version.Info) (Version, error) {
	if info == nil {
		return Version{}, fmt.Errorf("no version information")
	}
	if v, err := utilversion.ParseGeneric(info.GitVersion); err == nil {
		return Version{Minor: Minor{Major: int(v.Major()), Minor: int(v.Minor())}, GitVersion: info.GitVersion}, nil
	}
	major, errMajor := strconv.Atoi(strings.TrimSuffix(info.Major, "+"))
	minor, errMinor := strconv.Atoi(strings.TrimSuffix(info.Minor, "+"))
	if errMajor != nil || errMinor != nil {
		return Version{}, fmt.Errorf("unparseable apiserver version (gitVersion %q, major %q, minor %q)", info.GitVersion, info.Major, info.Minor)
	}
	git := info.GitVersion
	if git == "" {
		git = "v" + strconv.Itoa(major) + "." + strconv.Itoa(minor)
	}
	return Version{Minor: Minor{Major: major, Minor: minor}, GitVersion: git}, nil
}
