package olm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// csvFile is the CSV's file name in every Slicer bundle (hack/bundle writes it).
const csvFile = "slicer-operator.clusterserviceversion.yaml"

// loopbackBundle copies the bundle directory src to dst and adapts the CSV's operator
// Deployment to the loopback-only local node, with the same patch config/overlays/emulated
// applies to the kustomize install (overlayPatch): host network, loopback binds for metrics and
// health, probes on 127.0.0.1, Recreate, and the apiserver at 127.0.0.1:16443 through
// KUBERNETES_SERVICE_HOST/PORT. The overlay's image settings (imagePullPolicy and the
// RELATED_IMAGE_* variables naming localhost/...:dev images) are left out: the bundle's own
// images are what is tested. Nothing else in the bundle changes (docs/olm-testing.md).
func loopbackBundle(src, dst, overlayPatch string) error {
	if err := copyDir(src, dst); err != nil {
		return err
	}
	patch, err := loopbackPatch(overlayPatch)
	if err != nil {
		return err
	}
	path := filepath.Join(dst, "manifests", csvFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read CSV: %w", err)
	}
	var csv map[string]any
	if err := yaml.Unmarshal(raw, &csv); err != nil {
		return fmt.Errorf("parse CSV %s: %w", path, err)
	}
	deployments, ok := nested(csv, "spec", "install", "spec", "deployments").([]any)
	if !ok || len(deployments) != 1 {
		return fmt.Errorf("CSV %s: want exactly one install deployment", path)
	}
	dep := deployments[0].(map[string]any)
	original, err := json.Marshal(map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "spec": dep["spec"]})
	if err != nil {
		return fmt.Errorf("CSV deployment: %w", err)
	}
	patched, err := strategicpatch.StrategicMergePatch(original, patch, appsv1.Deployment{})
	if err != nil {
		return fmt.Errorf("apply %s to the CSV's deployment: %w", overlayPatch, err)
	}
	var out map[string]any
	if err := json.Unmarshal(patched, &out); err != nil {
		return fmt.Errorf("patched deployment: %w", err)
	}
	dep["spec"] = out["spec"]
	raw, err = yaml.Marshal(csv)
	if err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	return nil
}

// loopbackPatch reads the emulated overlay's Deployment patch and keeps its loopback part: the
// whole patch but metadata, imagePullPolicy and the RELATED_IMAGE_* variables.
func loopbackPatch(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read overlay patch: %w", err)
	}
	var p map[string]any
	if err := yaml.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("parse overlay patch %s: %w", path, err)
	}
	delete(p, "metadata")
	containers, ok := nested(p, "spec", "template", "spec", "containers").([]any)
	if !ok {
		return nil, fmt.Errorf("overlay patch %s: no containers", path)
	}
	for _, c := range containers {
		c := c.(map[string]any)
		delete(c, "imagePullPolicy")
		if env, ok := c["env"].([]any); ok {
			kept := []any{}
			for _, e := range env {
				if !strings.HasPrefix(e.(map[string]any)["name"].(string), "RELATED_IMAGE_") {
					kept = append(kept, e)
				}
			}
			c["env"] = kept
		}
	}
	out, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("overlay patch: %w", err)
	}
	return out, nil
}

func nested(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("copy bundle: %w", err)
		}
		return os.WriteFile(target, raw, 0o644)
	})
}

// previousBundle copies the current bundle src to dst as the release before it: version
// previous, CSV slicer-operator.v<previous>, no spec.replaces, olm.skipRange "<previous>", and
// every image tag v<current> (the operator's, the RELATED_IMAGE_* values with the schedulers'
// -k8s-1.N tags, relatedImages, containerImage) retagged v<previous>. images/local.sh builds
// those tags from the same binaries, so an upgrade to the current bundle rolls every operand
// while the code stays the same (docs/olm-testing.md).
func previousBundle(src, dst, current, previous string) error {
	if err := copyDir(src, dst); err != nil {
		return err
	}
	path := filepath.Join(dst, "manifests", csvFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read CSV: %w", err)
	}
	retagged := strings.ReplaceAll(string(raw), ":v"+current, ":v"+previous)
	var csv map[string]any
	if err := yaml.Unmarshal([]byte(retagged), &csv); err != nil {
		return fmt.Errorf("parse CSV %s: %w", path, err)
	}
	md, _ := csv["metadata"].(map[string]any)
	spec, _ := csv["spec"].(map[string]any)
	annotations, _ := nested(csv, "metadata", "annotations").(map[string]any)
	if md == nil || spec == nil || annotations == nil {
		return fmt.Errorf("CSV %s: no metadata, annotations or spec", path)
	}
	if spec["version"] != current {
		return fmt.Errorf("CSV %s: version %v, want %s", path, spec["version"], current)
	}
	md["name"] = "slicer-operator.v" + previous
	spec["version"] = previous
	delete(spec, "replaces")
	annotations["olm.skipRange"] = "<" + previous
	out, err := yaml.Marshal(csv)
	if err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	if strings.Contains(string(out), "v"+current) {
		return fmt.Errorf("CSV %s: v%s left after the retag", path, current)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	return nil
}

// readDigests reads images/local.sh's output, "ARCHIVE REFERENCE DIGEST" per image, into
// reference -> digest.
func readDigests(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read digests: %w", err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || !strings.HasPrefix(f[2], "sha256:") {
			return nil, fmt.Errorf("%s: want ARCHIVE REFERENCE DIGEST, got %q", path, l)
		}
		out[f[1]] = f[2]
	}
	return out, nil
}
