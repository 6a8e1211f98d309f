package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/internal/kubeversion"
)

const repoRoot = "../.."

func generateCSV(t *testing.T, digests map[string]string) (obj, map[string][]byte) {
	t.Helper()
	files, err := Generate(repoRoot, digests)
	if err != nil {
		t.Fatal(err)
	}
	var csv obj
	if err := yaml.Unmarshal(files["manifests/"+Package+".clusterserviceversion.yaml"], &csv); err != nil {
		t.Fatal(err)
	}
	return csv, files
}

// images returns every image reference the CSV names, by where it is named.
func images(csv obj) map[string][]string {
	found := map[string][]string{}
	spec := csv["spec"].(obj)
	for _, d := range spec["install"].(obj)["spec"].(obj)["deployments"].([]any) {
		for _, c := range d.(obj)["spec"].(obj)["template"].(obj)["spec"].(obj)["containers"].([]any) {
			c := c.(obj)
			found["deployment"] = append(found["deployment"], str(c, "image"))
			for _, e := range asList(c["env"]) {
				if n := str(e.(obj), "name"); strings.HasPrefix(n, "RELATED_IMAGE_") {
					found["env"] = append(found["env"], str(e.(obj), "value"))
				}
			}
		}
	}
	found["containerImage"] = []string{csv["metadata"].(obj)["annotations"].(obj)["containerImage"].(string)}
	for _, r := range asList(spec["relatedImages"]) {
		found["relatedImages"] = append(found["relatedImages"], str(r.(obj), "image"))
	}
	return found
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

// The OpenShift window and minKubeVersion follow the supported Kubernetes
// minors (internal/kubeversion), in the CSV, annotations.yaml and the
// bundle image's labels alike.
func TestVersionWindowFollowsSupportedMinors(t *testing.T) {
	csv, files := generateCSV(t, nil)
	if got := str(csv, "spec", "minKubeVersion"); got != kubeversion.MinKubeVersion() {
		t.Errorf("minKubeVersion = %q, want %q", got, kubeversion.MinKubeVersion())
	}
	want := kubeversion.OpenShiftVersions()
	var ann struct{ Annotations map[string]string }
	if err := yaml.Unmarshal(files["metadata/annotations.yaml"], &ann); err != nil {
		t.Fatal(err)
	}
	if got := ann.Annotations["com.redhat.openshift.versions"]; got != want {
		t.Errorf("annotations.yaml com.redhat.openshift.versions = %q, want %q", got, want)
	}
	if !strings.Contains(string(files["bundle.Dockerfile"]), "LABEL com.redhat.openshift.versions="+want+"\n") {
		t.Errorf("bundle.Dockerfile lacks the label com.redhat.openshift.versions=%s", want)
	}
}

// relatedImages lists the operator image and every RELATED_IMAGE_* value,
// each once, and the operator reads its operands' images from those
// variables only (one per component, one scheduler per supported minor).
func TestRelatedImagesListEveryImage(t *testing.T) {
	csv, _ := generateCSV(t, nil)
	found := images(csv)
	want := sorted(append(append([]string(nil), found["deployment"]...), found["env"]...))
	if got := sorted(found["relatedImages"]); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("relatedImages = %v, want the deployment's and RELATED_IMAGE_* images %v", got, want)
	}
	if n, want := len(found["env"]), 2+len(kubeversion.Supported); n != want {
		t.Errorf("%d RELATED_IMAGE_* variables, want %d (webhook, agent, a scheduler per minor)", n, want)
	}
}

// With digests, every image the CSV names is pinned (REPOSITORY@sha256:...),
// and a missing digest fails the build naming the image.
func TestDigestsPinEveryImage(t *testing.T) {
	unpinned, _ := generateCSV(t, nil)
	digests := map[string]string{}
	for _, refs := range images(unpinned) {
		for i, r := range refs {
			digests[r] = fmt.Sprintf("sha256:%064x", len(digests)*100+i+1)
		}
	}
	// The file format is mkimage's output (an archive path first) or bare pairs.
	var lines []string
	n := 0
	for ref, d := range digests {
		if n%2 == 0 {
			lines = append(lines, "/tmp/x.tar "+ref+" "+d)
		} else {
			lines = append(lines, ref+" "+d)
		}
		n++
	}
	path := filepath.Join(t.TempDir(), "digests")
	if err := os.WriteFile(path, []byte("# images\n\n"+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	read, err := readDigests(path)
	if err != nil {
		t.Fatal(err)
	}
	csv, _ := generateCSV(t, read)
	byDigest := regexp.MustCompile(`^quay\.io/slicer-operator/slicer-[a-z]+@sha256:[0-9a-f]{64}$`)
	for where, refs := range images(csv) {
		for _, r := range refs {
			if !byDigest.MatchString(r) {
				t.Errorf("%s image %q is not pinned by digest", where, r)
			}
		}
	}
	for ref, d := range digests {
		if got := pinned(ref, d); !strings.HasSuffix(got, "@"+d) || strings.Contains(got[strings.LastIndex(got, "/"):], ":v") {
			t.Errorf("pinned(%q) = %q", ref, got)
		}
	}

	var missingOne string
	for ref := range digests {
		missingOne = ref
		break
	}
	delete(read, missingOne)
	if _, err := Generate(repoRoot, read); err == nil || !strings.Contains(err.Error(), missingOne) {
		t.Errorf("Generate without a digest for %s = %v, want an error naming it", missingOne, err)
	}
}

func TestReadDigestsRejectsMalformedLines(t *testing.T) {
	for _, line := range []string{"quay.io/a:v1", "quay.io/a:v1 sha256:abc", "quay.io/a:v1 md5:" + strings.Repeat("0", 64), "a b c d"} {
		path := filepath.Join(t.TempDir(), "digests")
		if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readDigests(path); err == nil {
			t.Errorf("readDigests accepted %q", line)
		}
	}
}
