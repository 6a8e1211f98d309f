package packaging_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/internal/kubeversion"
	"github.com/slicer-operator/slicer/test/framework"
)

const csvFile = "slicer-operator.clusterserviceversion.yaml"

// openShiftKube maps OpenShift minor releases to their Kubernetes minor
// (preflight's internal/bundle table).
var openShiftKube = map[string]string{
	"v4.14": "1.27", "v4.15": "1.28", "v4.16": "1.29", "v4.17": "1.30",
	"v4.18": "1.31", "v4.19": "1.32", "v4.20": "1.33", "v4.21": "1.34",
	"v4.22": "1.35", "v5.0": "1.36",
}

func loadCSV() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	Expect(yaml.Unmarshal(readFile("bundle", "manifests", csvFile), &u.Object)).To(Succeed())
	return u
}

var _ = Describe("OLM bundle", func() {
	It("has alm-examples the apiserver accepts, one with a spec per owned CRD", func() {
		csv := loadCSV()
		var examples []map[string]any
		Expect(json.Unmarshal([]byte(csv.GetAnnotations()["alm-examples"]), &examples)).To(Succeed())
		owned, _, _ := unstructured.NestedSlice(csv.Object, "spec", "customresourcedefinitions", "owned")
		Expect(examples).To(HaveLen(len(owned)))
		apply(namespace("packaging-examples", "restricted"))
		for i, o := range owned {
			ex := &unstructured.Unstructured{Object: examples[i]}
			Expect(ex.GetKind()).To(Equal(o.(map[string]any)["kind"]))
			Expect(ex.Object["spec"]).NotTo(BeEmpty())
			if ex.GetKind() == "SliceAllocation" { // the only namespaced kind
				ex.SetNamespace("packaging-examples")
			}
			Expect(k8s.Create(ctx, ex, client.DryRunAll)).To(Succeed(), "alm-example %s", ex.GetKind())
		}
	})

	It("has a Deployment the apiserver accepts in a restricted namespace, run by a ServiceAccount with permissions", func() {
		csv := loadCSV()
		deployments, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "deployments")
		Expect(deployments).To(HaveLen(1))
		apply(namespace("packaging-olm", "restricted"))
		apply(serviceAccount("packaging-olm", "slicer-operator"))
		dep := deployments[0].(map[string]any)
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": dep["name"], "namespace": "packaging-olm"},
			"spec":     dep["spec"],
		}}
		Expect(k8s.Create(ctx, u, client.DryRunAll)).To(Succeed())
		d := toDeployment(u)
		Expect(k8s.Create(ctx, podOf(d.Spec.Template, "packaging-olm", "csv-probe"), client.DryRunAll)).To(Succeed())

		sa := d.Spec.Template.Spec.ServiceAccountName
		for _, kind := range []string{"permissions", "clusterPermissions"} {
			perms, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", kind)
			Expect(perms).NotTo(BeEmpty(), kind)
			for _, p := range perms {
				Expect(p).To(HaveKeyWithValue("serviceAccountName", sa))
				rules := p.(map[string]any)["rules"].([]any)
				for _, r := range rules {
					r := r.(map[string]any)
					Expect(r["verbs"]).NotTo(ContainElement(BeElementOf("*", "escalate", "bind", "impersonate")), "%v", r)
					Expect(r["resources"]).NotTo(ContainElement(BeElementOf("*", "pods/exec")), "%v", r)
					Expect(r["apiGroups"]).NotTo(ContainElement("*"), "%v", r)
					if kind == "clusterPermissions" {
						Expect(r["resources"]).NotTo(ContainElement("secrets"), "secrets only in the operator namespace")
					}
					if contains(r["apiGroups"], "apiextensions.k8s.io") {
						Expect(r["verbs"]).To(ConsistOf("get", "list", "watch"), "no CRD writes")
					}
				}
			}
		}
	})

	It("has only manifests the apiserver accepts besides the CSV", func() {
		apply(namespace("packaging-olm", "restricted"))
		files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "bundle", "manifests", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		n := 0
		for _, f := range files {
			if filepath.Base(f) == csvFile {
				continue
			}
			raw, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			for _, u := range decode(raw) {
				Expect(u.GetNamespace()).To(BeEmpty(), "OLM sets the namespace: %s", f)
				if u.GetKind() == "Service" {
					u.SetNamespace("packaging-olm")
				}
				Expect(dryRunApply(u)).To(Succeed(), f)
				n++
			}
		}
		Expect(n).To(BeNumerically(">=", 3), "the CRDs at least")
	})

	It("lists every image in relatedImages with a matching RELATED_IMAGE_* variable", func() {
		csv := loadCSV()
		related, _, _ := unstructured.NestedSlice(csv.Object, "spec", "relatedImages")
		images := map[string]string{}
		for _, r := range related {
			r := r.(map[string]any)
			images[r["name"].(string)] = r["image"].(string)
		}
		deployments, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "deployments")
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "spec": deployments[0].(map[string]any)["spec"]}}
		c := toDeployment(u).Spec.Template.Spec.Containers[0]
		want := map[string]string{"operator": c.Image}
		for _, e := range c.Env {
			if name, ok := strings.CutPrefix(e.Name, "RELATED_IMAGE_"); ok {
				want[strings.ToLower(name)] = e.Value
			}
		}
		Expect(images).To(Equal(want))
		// One scheduler image per supported minor, tagged with it.
		Expect(images).NotTo(HaveKey("scheduler"))
		for _, minor := range kubeMinors() {
			Expect(images).To(HaveKeyWithValue(strings.ToLower(strings.TrimPrefix(schedulerImageEnv(minor), "RELATED_IMAGE_")),
				MatchRegexp(`/slicer-scheduler:v\d+\.\d+\.\d+-k8s-%s$`, regexp.QuoteMeta(minor))), minor)
		}
		Expect(images).To(HaveLen(len(kubeMinors())+3), "the operator, a scheduler per minor, the webhook and the agent")
		// The operator's supported window is exactly the minors a scheduler is built for,
		// and the CSV's minKubeVersion is the oldest of them.
		var supported []string
		for _, m := range kubeversion.Supported {
			supported = append(supported, m.String())
		}
		Expect(supported).To(Equal(kubeMinors()), "internal/kubeversion.Supported and the scheduler builds")
		minKube, _, _ := unstructured.NestedString(csv.Object, "spec", "minKubeVersion")
		Expect(minKube).To(HavePrefix(supported[0]+"."), "minKubeVersion is the oldest supported minor")
		Expect(images).To(HaveKey("webhook"))
		Expect(images).To(HaveKey("agent"))
		Expect(csv.GetAnnotations()).To(HaveKeyWithValue("containerImage", c.Image))
		for _, img := range images {
			Expect(img).NotTo(HaveSuffix(":latest"))
			Expect(img).To(MatchRegexp(`:v\d+\.\d+\.\d+(-k8s-1\.\d+)?$|@sha256:`))
		}
		Expect(c.Resources.Requests).To(HaveKey(corev1.ResourceCPU))
		Expect(c.Resources.Requests).To(HaveKey(corev1.ResourceMemory))
	})

	It("sets the seven feature annotations to literal true or false, and the metadata OperatorHub shows", func() {
		ann := loadCSV().GetAnnotations()
		for _, f := range []string{"disconnected", "fips-compliant", "proxy-aware", "tls-profiles", "token-auth-aws", "token-auth-azure", "token-auth-gcp"} {
			Expect(ann).To(HaveKeyWithValue("features.operators.openshift.io/"+f, BeElementOf("true", "false")), f)
		}
		// disconnected=true would need the per-kernel driver image mirrored,
		// which a mirror list cannot name in advance (docs/install.md).
		Expect(ann["features.operators.openshift.io/disconnected"]).To(Equal("false"))
		Expect(ann).To(HaveKeyWithValue("capabilities", "Deep Insights"))
		Expect(ann).To(HaveKeyWithValue("categories", "AI/Machine Learning,OpenShift Optional"))
		Expect(ann).To(HaveKeyWithValue("operatorframework.io/suggested-namespace", "slicer-system"))
		Expect(ann).To(HaveKey("olm.skipRange"))
		modes, _, _ := unstructured.NestedSlice(loadCSV().Object, "spec", "installModes")
		for _, m := range modes {
			m := m.(map[string]any)
			Expect(m["supported"]).To(Equal(m["type"] == "AllNamespaces"), "install mode %s", m["type"])
		}
	})

	It("targets OpenShift versions consistent with minKubeVersion, on a stable or candidate channel", func() {
		var meta struct {
			Annotations map[string]string `json:"annotations"`
		}
		Expect(yaml.Unmarshal(readFile("bundle", "metadata", "annotations.yaml"), &meta)).To(Succeed())
		// A closed range "vFIRST-vLAST": FIRST ships minKubeVersion's minor,
		// LAST a supported minor (an OpenShift whose apiserver the operator
		// refuses must not list the bundle).
		ocp := meta.Annotations["com.redhat.openshift.versions"]
		first, last, isRange := strings.Cut(ocp, "-")
		Expect(isRange).To(BeTrue(), "com.redhat.openshift.versions %q is not a closed range", ocp)
		Expect(openShiftKube).To(HaveKey(first))
		Expect(openShiftKube).To(HaveKey(last))
		minKube, _, _ := unstructured.NestedString(loadCSV().Object, "spec", "minKubeVersion")
		Expect(minKube).To(HavePrefix(openShiftKube[first] + "."))
		var supported []string
		for _, m := range kubeversion.Supported {
			supported = append(supported, m.String())
		}
		Expect(supported).To(ContainElement(openShiftKube[last]), "the range's last OpenShift %s ships Kubernetes %s", last, openShiftKube[last])
		Expect(meta.Annotations["operators.operatorframework.io.bundle.channels.v1"]).To(MatchRegexp(`^(stable|candidate)`))
	})

	It("is under 1 MiB compressed and holds no NetworkPolicy, dashboards or RBAC on SCCs outside the CSV", func() {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		root := filepath.Join(framework.RepoRoot(), "bundle")
		Expect(filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.HasSuffix(p, ".yaml") {
				var tm metav1.TypeMeta
				if err := yaml.Unmarshal(raw, &tm); err != nil {
					return err
				}
				Expect(tm.Kind).NotTo(BeElementOf("NetworkPolicy", "PriorityClass", "ConfigMap"), p)
			}
			rel, _ := filepath.Rel(root, p)
			if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(raw))}); err != nil {
				return err
			}
			_, err = io.Copy(tw, bytes.NewReader(raw))
			return err
		})).To(Succeed())
		Expect(tw.Close()).To(Succeed())
		Expect(gz.Close()).To(Succeed())
		GinkgoWriter.Printf("bundle: %d bytes compressed\n", buf.Len())
		Expect(buf.Len()).To(BeNumerically("<", 1<<20))
	})
})

func contains(list any, s string) bool {
	l, _ := list.([]any)
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}
