// Command bundle writes the OLM bundle (bundle/) from config/ and the
// hand-written CSV base in hack/bundle: the ClusterServiceVersion, Slicer's
// CRDs, the operator's metrics Service and metrics-reader ClusterRole,
// metadata/annotations.yaml and bundle.Dockerfile. The output depends only on
// its inputs (no clock, sorted keys), so `make bundle && git diff --exit-code
// bundle/` detects a stale bundle.
//
//	go run ./hack/bundle [-root .] [-out bundle] [-digests FILE]
//
// -digests pins every image the bundle names by digest, as a release does once
// its images are pushed: FILE maps each image reference the CSV names
// (config/manager's image and RELATED_IMAGE_* values) to its manifest digest,
// one "REFERENCE DIGEST" per line (what images/local.sh and mkimage print,
// after the archive path). The CSV's Deployment, its RELATED_IMAGE_* values,
// containerImage and relatedImages then all say REPOSITORY@DIGEST.
package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/hack/internal/genfiles"
	"github.com/slicer-operator/slicer/internal/kubeversion"
)

// Package is the OLM package name; the CSV is <Package>.v<version>.
const Package = "slicer-operator"

// operatorSA is the operator's ServiceAccount (config/manager).
const operatorSA = "slicer-operator"

// Release is hack/bundle/release.yaml.
type Release struct {
	Version        string `json:"version"`
	CreatedAt      string `json:"createdAt"`
	Replaces       string `json:"replaces"`
	SkipRange      string `json:"skipRange"`
	Channels       string `json:"channels"`
	DefaultChannel string `json:"defaultChannel"`
}

type obj = map[string]any

func main() {
	root := flag.String("root", ".", "Repository root.")
	out := flag.String("out", "bundle", "Output directory, relative to -root unless absolute; replaced entirely.")
	digestFile := flag.String("digests", "", `Pin images by digest: a file of "REFERENCE DIGEST" lines.`)
	flag.Parse()
	var digests map[string]string
	if *digestFile != "" {
		var err error
		if digests, err = readDigests(*digestFile); err != nil {
			fmt.Fprintln(os.Stderr, "bundle:", err)
			os.Exit(1)
		}
	}
	outDir := *out
	if !filepath.IsAbs(outDir) {
		outDir = filepath.Join(*root, outDir)
	}
	if err := run(*root, outDir, digests); err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
}

func run(root, out string, digests map[string]string) error {
	files, err := Generate(root, digests)
	if err != nil {
		return err
	}
	return genfiles.WriteTree(out, files)
}

// Generate returns the bundle's files by path relative to the bundle root.
// With digests (see the command's doc), every image is pinned by digest.
func Generate(root string, digests map[string]string) (map[string][]byte, error) {
	var rel Release
	if err := genfiles.ReadYAML(filepath.Join(root, "hack/bundle/release.yaml"), &rel); err != nil {
		return nil, err
	}
	if rel.Version == "" || rel.CreatedAt == "" || rel.Channels == "" {
		return nil, errors.New("release.yaml: version, createdAt and channels are required")
	}
	files := map[string][]byte{}

	crdDir := filepath.Join(root, "config/crd/bases")
	crdFiles, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("glob: %w", err)
	}
	crdNames := map[string]bool{}
	for _, f := range crdFiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		var crd obj
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		crdNames[str(crd, "metadata", "name")] = true
		files["manifests/"+filepath.Base(f)] = raw
	}

	manager, err := genfiles.ReadDocs(filepath.Join(root, "config/manager/manager.yaml"))
	if err != nil {
		return nil, err
	}
	roles, err := genfiles.ReadDocs(filepath.Join(root, "config/rbac/role.yaml"))
	if err != nil {
		return nil, err
	}
	extra, err := genfiles.ReadDocs(filepath.Join(root, "config/manager/metrics_service.yaml"))
	if err != nil {
		return nil, err
	}
	bindings, err := genfiles.ReadDocs(filepath.Join(root, "config/rbac/service_account_binding.yaml"))
	if err != nil {
		return nil, err
	}
	for _, o := range append(extra, bindings...) {
		kind := str(o, "kind")
		if kind != "Service" && kind != "ClusterRole" {
			continue // bindings are OLM's job (install strategy)
		}
		delete(o["metadata"].(obj), "namespace")
		b, err := yaml.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("marshal: %w", err)
		}
		files["manifests/"+str(o, "metadata", "name")+"_"+strings.ToLower(kind)+".yaml"] = b
	}

	csv, err := buildCSV(root, rel, manager, roles, crdNames)
	if err != nil {
		return nil, err
	}
	if digests != nil {
		if err := pinDigests(csv, digests); err != nil {
			return nil, err
		}
	}
	b, err := yaml.Marshal(csv)
	if err != nil {
		return nil, fmt.Errorf("marshal csv: %w", err)
	}
	files["manifests/"+Package+".clusterserviceversion.yaml"] = b

	annotations := obj{"annotations": obj{
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1":       "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":        "metadata/",
		"operators.operatorframework.io.bundle.package.v1":         Package,
		"operators.operatorframework.io.bundle.channels.v1":        rel.Channels,
		"operators.operatorframework.io.bundle.channel.default.v1": rel.DefaultChannel,
		"com.redhat.openshift.versions":                            kubeversion.OpenShiftVersions(),
	}}
	if b, err = yaml.Marshal(annotations); err != nil {
		return nil, fmt.Errorf("marshal annotations: %w", err)
	}
	files["metadata/annotations.yaml"] = b
	files["bundle.Dockerfile"] = []byte(dockerfile(rel))
	return files, nil
}

func buildCSV(root string, rel Release, manager, roles []obj, crdNames map[string]bool) (obj, error) {
	var csv obj
	if err := genfiles.ReadYAML(filepath.Join(root, "hack/bundle/csv.base.yaml"), &csv); err != nil {
		return nil, err
	}
	meta := csv["metadata"].(obj)
	spec := csv["spec"].(obj)
	ann := meta["annotations"].(obj)
	meta["name"] = Package + ".v" + rel.Version
	spec["version"] = rel.Version
	spec["minKubeVersion"] = kubeversion.MinKubeVersion()
	if rel.Replaces != "" {
		spec["replaces"] = rel.Replaces
	}
	if rel.SkipRange != "" {
		ann["olm.skipRange"] = rel.SkipRange
	}
	ann["createdAt"] = rel.CreatedAt

	// Owned CRDs: the base must describe exactly config/crd/bases.
	owned := spec["customresourcedefinitions"].(obj)["owned"].([]any)
	described := map[string]bool{}
	for _, o := range owned {
		described[str(o.(obj), "name")] = true
	}
	for n := range crdNames {
		if !described[n] {
			return nil, fmt.Errorf("csv.base.yaml describes no owned CRD %s", n)
		}
	}
	for n := range described {
		if !crdNames[n] {
			return nil, fmt.Errorf("csv.base.yaml describes %s, which config/crd/bases lacks", n)
		}
	}

	// alm-examples: one per owned kind, from config/samples, in owned order.
	var examples []any
	for _, o := range owned {
		kind := str(o.(obj), "kind")
		p := filepath.Join(root, "config/samples", "slicer_v1alpha1_"+strings.ToLower(kind)+".yaml")
		var ex obj
		if err := genfiles.ReadYAML(p, &ex); err != nil {
			return nil, fmt.Errorf("alm-example for %s: %w", kind, err)
		}
		if s, ok := ex["spec"].(obj); !ok || len(s) == 0 {
			return nil, fmt.Errorf("alm-example %s has no spec", p)
		}
		examples = append(examples, ex)
	}
	ex, err := json.MarshalIndent(examples, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("alm-examples: %w", err)
	}
	ann["alm-examples"] = string(ex)

	icon, err := os.ReadFile(filepath.Join(root, "hack/bundle/icon.svg"))
	if err != nil {
		return nil, fmt.Errorf("icon: %w", err)
	}
	spec["icon"] = []any{obj{"base64data": base64.StdEncoding.EncodeToString(icon), "mediatype": "image/svg+xml"}}

	// Install strategy: the operator Deployment and its RBAC.
	var deployments []any
	var related []any
	for _, o := range manager {
		if str(o, "kind") != "Deployment" {
			continue
		}
		dspec := o["spec"].(obj)
		deployments = append(deployments, obj{
			"name":  str(o, "metadata", "name"),
			"label": o["metadata"].(obj)["labels"],
			"spec":  dspec,
		})
		for _, c := range dspec["template"].(obj)["spec"].(obj)["containers"].([]any) {
			c := c.(obj)
			image := str(c, "image")
			ann["containerImage"] = image
			related = append(related, obj{"name": "operator", "image": image})
			for _, e := range asList(c["env"]) {
				e := e.(obj)
				name := str(e, "name")
				if !strings.HasPrefix(name, "RELATED_IMAGE_") {
					continue
				}
				related = append(related, obj{
					"name":  strings.ToLower(strings.TrimPrefix(name, "RELATED_IMAGE_")),
					"image": str(e, "value"),
				})
			}
		}
	}
	if len(deployments) != 1 {
		return nil, fmt.Errorf("config/manager/manager.yaml: want 1 Deployment, got %d", len(deployments))
	}
	var permissions, clusterPermissions []any
	for _, r := range roles {
		entry := obj{"serviceAccountName": operatorSA, "rules": r["rules"]}
		switch str(r, "kind") {
		case "ClusterRole":
			clusterPermissions = append(clusterPermissions, entry)
		case "Role":
			permissions = append(permissions, entry)
		}
	}
	install := obj{"deployments": deployments, "clusterPermissions": clusterPermissions}
	if len(permissions) > 0 {
		install["permissions"] = permissions
	}
	spec["install"] = obj{"strategy": "deployment", "spec": install}
	spec["relatedImages"] = related
	return csv, nil
}

func dockerfile(rel Release) string {
	return `# Generated by hack/bundle (make bundle); do not edit.
FROM scratch

LABEL operators.operatorframework.io.bundle.mediatype.v1=registry+v1
LABEL operators.operatorframework.io.bundle.manifests.v1=manifests/
LABEL operators.operatorframework.io.bundle.metadata.v1=metadata/
LABEL operators.operatorframework.io.bundle.package.v1=` + Package + `
LABEL operators.operatorframework.io.bundle.channels.v1=` + rel.Channels + `
LABEL operators.operatorframework.io.bundle.channel.default.v1=` + rel.DefaultChannel + `
LABEL com.redhat.openshift.versions=` + kubeversion.OpenShiftVersions() + `

COPY manifests /manifests/
COPY metadata /metadata/
`
}

func str(o obj, path ...string) string {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(obj)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
