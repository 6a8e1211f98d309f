package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// digestPattern is an OCI manifest digest as registries report it.
var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// readDigests reads "REFERENCE DIGEST" lines; blank lines and # comments are
// skipped, and a line may lead with an archive path (mkimage's output:
// "ARCHIVE REFERENCE DIGEST").
func readDigests(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read digests: %w", err)
	}
	digests := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) == 3 {
			f = f[1:]
		}
		if len(f) != 2 || !digestPattern.MatchString(f[1]) {
			return nil, fmt.Errorf("%s:%d: want REFERENCE sha256:<64 hex>", path, n)
		}
		digests[f[0]] = f[1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read digests: %w", err)
	}
	return digests, nil
}

// pinned is ref by digest: its repository (tag dropped) @ digest.
func pinned(ref, digest string) string {
	repo := ref
	if at := strings.Index(repo, "@"); at >= 0 {
		repo = repo[:at]
	}
	if slash, colon := strings.LastIndex(repo, "/"), strings.LastIndex(repo, ":"); colon > slash {
		repo = repo[:colon]
	}
	return repo + "@" + digest
}

// pinDigests rewrites every image the CSV names (the Deployment's
// containers, their RELATED_IMAGE_* values, containerImage, relatedImages)
// to its digest form; an image digests lacks is an error naming it, so a
// release cannot ship a half-pinned bundle.
func pinDigests(csv obj, digests map[string]string) error {
	missing := map[string]bool{}
	pin := func(ref string) string {
		d, ok := digests[ref]
		if !ok {
			missing[ref] = true
			return ref
		}
		return pinned(ref, d)
	}
	spec := csv["spec"].(obj)
	for _, d := range spec["install"].(obj)["spec"].(obj)["deployments"].([]any) {
		pod := d.(obj)["spec"].(obj)["template"].(obj)["spec"].(obj)
		for _, key := range []string{"initContainers", "containers"} {
			for _, c := range asList(pod[key]) {
				c := c.(obj)
				c["image"] = pin(str(c, "image"))
				for _, e := range asList(c["env"]) {
					e := e.(obj)
					if strings.HasPrefix(str(e, "name"), "RELATED_IMAGE_") {
						e["value"] = pin(str(e, "value"))
					}
				}
			}
		}
	}
	ann := csv["metadata"].(obj)["annotations"].(obj)
	ann["containerImage"] = pin(ann["containerImage"].(string))
	for _, r := range asList(spec["relatedImages"]) {
		r := r.(obj)
		r["image"] = pin(str(r, "image"))
	}
	if len(missing) > 0 {
		refs := make([]string, 0, len(missing))
		for r := range missing {
			refs = append(refs, r)
		}
		sort.Strings(refs)
		return fmt.Errorf("no digest for %s", strings.Join(refs, ", "))
	}
	return nil
}
