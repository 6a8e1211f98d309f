// Package bundlevalidate runs the operator-framework/api validators that
// `operator-sdk bundle validate --select-optional suite=operatorframework`
// runs over bundle/. It is a separate module so operator-framework/api (and
// the grpc/otel versions it pulls) stays out of Slicer's dependency graph.
package bundlevalidate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
)

// kubeVersion is the newest Kubernetes in the bundle's range (1.37, the
// minor the main module and envtest run): the deprecated-API check looks for
// APIs removed up to it.
const kubeVersion = "1.37"

// acceptedWarnings are warnings kept on purpose, each with its reason.
var acceptedWarnings = map[string]string{
	"Migrate the API(s) for events": "false positive: the operator's RBAC rule grants events in the core and " +
		"events.k8s.io groups (RBAC names no version); the operator uses events.k8s.io/v1, served since 1.19, " +
		"and the validator flags any rule on events.k8s.io events as the removed v1beta1",
}

func TestBundle(t *testing.T) {
	errs, warns := validate(t, filepath.Join("..", "..", "..", "bundle"))
	for _, e := range errs {
		t.Errorf("error: %s", e)
	}
	for _, w := range warns {
		t.Errorf("warning not fixed and not accepted: %s", w)
	}
}

// TestValidatorsCatchABrokenBundle shows the validators run: a copy of the
// bundle with an invalid maintainer email and no minKubeVersion fails.
func TestValidatorsCatchABrokenBundle(t *testing.T) {
	src := filepath.Join("..", "..", "..", "bundle")
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	csv := filepath.Join(dst, "manifests", "slicer-operator.clusterserviceversion.yaml")
	raw, err := os.ReadFile(csv)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(raw), "slicer@slicer.dev", "not-an-email", 1)
	broken = strings.Replace(broken, "minKubeVersion: 1.35.0", "minKubeVersion: not-a-version", 1)
	if broken == string(raw) {
		t.Fatal("the CSV has no maintainer email or minKubeVersion to break")
	}
	if err := os.WriteFile(csv, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	errs, _ := validate(t, dst)
	var email, kube bool
	for _, e := range errs {
		email = email || strings.Contains(e, "not-an-email")
		kube = kube || strings.Contains(e, "not-a-version")
	}
	if !email || !kube {
		t.Errorf("want errors for the maintainer email and minKubeVersion, got %q", errs)
	}
}

func validate(t *testing.T, dir string) (errs, warns []string) {
	t.Helper()
	bundle, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		t.Fatalf("load bundle: %v", err)
	}
	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.AlphaDeprecatedAPIsValidator,
		validation.GoodPracticesValidator,
	)
	optional := map[string]string{"k8s-version": kubeVersion}
	results := validators.Validate(bundle, optional)
	if len(results) == 0 {
		t.Fatal("no validation results: the bundle was not validated")
	}
	if len(results) < len(validators) {
		t.Logf("%d validators gave %d results (validators without findings may return none)", len(validators), len(results))
	}
	for _, r := range results {
		t.Logf("result %q: %d errors, %d warnings", r.Name, len(r.Errors), len(r.Warnings))
		for _, e := range r.Errors {
			errs = append(errs, describe(r.Name, e))
		}
		for _, w := range r.Warnings {
			d := describe(r.Name, w)
			if reason, ok := accepted(d); ok {
				t.Logf("accepted warning: %s (%s)", d, reason)
				continue
			}
			warns = append(warns, d)
		}
	}
	sort.Strings(errs)
	sort.Strings(warns)
	t.Logf("%s: %d results, %d errors, %d unaccepted warnings", dir, len(results), len(errs), len(warns))
	return errs, warns
}

func describe(name string, e errors.Error) string {
	return name + ": " + e.Error()
}

func accepted(d string) (string, bool) {
	for frag, reason := range acceptedWarnings {
		if strings.Contains(d, frag) {
			return reason, true
		}
	}
	return "", false
}

// TestPinnedBundle validates the bundle as a release ships it: every image
// pinned by digest (hack/bundle -digests), with the same validators and no
// error or unaccepted warning.
func TestPinnedBundle(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "bundle", "manifests", "slicer-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]bool{}
	for _, r := range regexp.MustCompile(`quay\.io/slicer-operator/slicer-[a-z]+:[A-Za-z0-9._-]+`).FindAllString(string(raw), -1) {
		refs[r] = true
	}
	if len(refs) < 4 {
		t.Fatalf("found %d image references in the CSV, want the operator's and its operands'", len(refs))
	}
	var lines []string
	for r := range refs {
		lines = append(lines, fmt.Sprintf("%s sha256:%064x", r, len(lines)+1))
	}
	dir := t.TempDir()
	digests := filepath.Join(dir, "digests")
	if err := os.WriteFile(digests, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := filepath.Abs(filepath.Join(dir, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./hack/bundle", "-out", out, "-digests", digests)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/bundle -digests: %v\n%s", err, b)
	}
	pinned, err := os.ReadFile(filepath.Join(out, "manifests", "slicer-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(pinned), "@sha256:"); n < len(refs) {
		t.Errorf("%d digest references in the pinned CSV, want at least %d", n, len(refs))
	}
	errs, warns := validate(t, out)
	for _, e := range errs {
		t.Errorf("error: %s", e)
	}
	for _, w := range warns {
		t.Errorf("warning not fixed and not accepted: %s", w)
	}
}
