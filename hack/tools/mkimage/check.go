package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// The offline part of Red Hat's preflight container checks, applied to a
// built image (docs/design/invariants.md, image conventions; the
// Containerfiles themselves are checked in images/parsetest).
var (
	// RequiredLabels are the labels preflight's HasRequiredLabel wants, plus maintainer.
	RequiredLabels = []string{"name", "vendor", "version", "release", "summary", "description", "maintainer"}
	// MaxLayers is preflight's LayerCountAcceptable limit.
	MaxLayers = 40
	// nonRootUser is a numeric UID other than 0, with an optional GID
	// (preflight's RunAsNonRoot; a name cannot be checked without /etc/passwd).
	nonRootUser = regexp.MustCompile(`^[1-9][0-9]*(:[0-9]+)?$`)
)

// CheckImage returns every certification rule img breaks (nil when none):
// a required label missing or empty, no regular file under /licenses
// (HasLicense), more than MaxLayers layers, or a user that is not a numeric
// non-root UID unless allowRoot (the agent's documented exception: its
// Containerfile says USER 0 and why).
func CheckImage(img v1.Image, allowRoot bool) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var errs []error
	for _, l := range RequiredLabels {
		if strings.TrimSpace(cf.Config.Labels[l]) == "" {
			errs = append(errs, fmt.Errorf("label %q is missing", l))
		}
	}
	switch u := cf.Config.User; {
	case allowRoot && (u == "0" || u == "0:0" || u == "" || u == "root"):
	case !nonRootUser.MatchString(u):
		errs = append(errs, fmt.Errorf("user %q is not a numeric non-root UID", u))
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	if len(layers) > MaxLayers {
		errs = append(errs, fmt.Errorf("%d layers, more than %d", len(layers), MaxLayers))
	}
	licenses, err := licenseFiles(img)
	if err != nil {
		return err
	}
	if licenses == 0 {
		errs = append(errs, errors.New("no license file under /licenses"))
	}
	return errors.Join(errs...)
}

// licenseFiles counts the regular files under /licenses in the image's
// flattened filesystem.
func licenseFiles(img v1.Image) (int, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	n := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read image filesystem: %w", err)
		}
		p := path.Clean("/" + hdr.Name)
		if hdr.Typeflag == tar.TypeReg && strings.HasPrefix(p, "/licenses/") {
			n++
		}
	}
}
