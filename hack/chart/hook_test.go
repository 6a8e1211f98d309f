package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// renderHook renders the chart this generator writes (into a temporary folder)
// with the pinned Helm (bin/tools/helm), only the pre-delete hook's template.
func renderHook(t *testing.T, args ...string) []obj {
	t.Helper()
	helm, err := filepath.Abs(filepath.Join(repoRoot, "bin", "tools", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("helm not built: run `make helm` (pinned in hack/tools/helm): %v", err)
	}
	dir := filepath.Join(t.TempDir(), "slicer")
	if err := run(repoRoot, dir); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(helm, append([]string{"template", "rel", dir, "--namespace", "release-ns", "--show-only", "templates/" + uninstallHookFile}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	var objs []obj
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		var o obj
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs
}

func convert[T any](t *testing.T, o obj) T {
	t.Helper()
	var v T
	b, err := yaml.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &v); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return v
}

// The hook is a Job that runs the operator's image's uninstall-release for this
// release, after its ServiceAccount and RBAC (lower weights), all pre-delete
// hooks deleted once they succeed; the Job's log is printed when it fails, it
// is not retried, and its deadline is past the subcommand's own timeout, so
// the subcommand, not Kubernetes, says what is left.
func TestUninstallHookDefaults(t *testing.T) {
	objs := renderHook(t)
	var kinds []string
	lastWeight := -1 << 31
	var job batchv1.Job
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	for _, o := range objs {
		kind := str(o, "kind")
		kinds = append(kinds, kind)
		ann, _ := dig(o, "metadata", "annotations").(obj)
		if ann["helm.sh/hook"] != "pre-delete" {
			t.Errorf("%s: not a pre-delete hook: %v", kind, ann)
		}
		policies := strings.Split(str(o, "metadata", "annotations", "helm.sh/hook-delete-policy"), ",")
		if !slices.Contains(policies, "before-hook-creation") || !slices.Contains(policies, "hook-succeeded") || slices.Contains(policies, "hook-failed") {
			t.Errorf("%s: delete policy %v, want before-hook-creation,hook-succeeded (a failed Job stays for its log)", kind, policies)
		}
		w, err := strconv.Atoi(str(o, "metadata", "annotations", "helm.sh/hook-weight"))
		if err != nil || w <= lastWeight {
			t.Errorf("%s: weight %q not after the previous hook's %d", kind, str(o, "metadata", "annotations", "helm.sh/hook-weight"), lastWeight)
		}
		lastWeight = w
		if name := str(o, "metadata", "name"); name != "slicer-uninstall-rel" {
			t.Errorf("%s named %q", kind, name)
		}
		switch kind {
		case "Job":
			job = convert[batchv1.Job](t, o)
			if ann["helm.sh/hook-output-log-policy"] != "hook-failed" {
				t.Errorf("Job: Helm does not print its log when it fails: %v", ann)
			}
		case "ClusterRole":
			role = convert[rbacv1.ClusterRole](t, o)
		case "ClusterRoleBinding":
			binding = convert[rbacv1.ClusterRoleBinding](t, o)
		}
	}
	if want := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}; !slices.Equal(kinds, want) {
		t.Fatalf("hook objects %v, want %v", kinds, want)
	}
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].APIGroups, []string{"slicer.dev"}) ||
		!slices.Equal(role.Rules[0].Resources, []string{"slicers"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get", "list", "delete"}) {
		t.Errorf("the hook may do more than read and delete Slicers: %+v", role.Rules)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Namespace != "slicer-system" || binding.Subjects[0].Name != "slicer-uninstall-rel" || binding.RoleRef.Name != "slicer-uninstall-rel" {
		t.Errorf("binding: %+v", binding)
	}
	if job.Namespace != "slicer-system" || job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 {
		t.Errorf("Job in %q with backoffLimit %v, want the operator's namespace and no retry", job.Namespace, job.Spec.BackoffLimit)
	}
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	if pod.ServiceAccountName != "slicer-uninstall-rel" || c.Image != "quay.io/slicer-operator/slicer-operator:v0.2.0" {
		t.Errorf("Job runs %s as %s", c.Image, pod.ServiceAccountName)
	}
	if want := []string{"uninstall-release", "--release-name=rel", "--release-namespace=release-ns", "--timeout=240s"}; !slices.Equal(c.Args, want) {
		t.Errorf("args %v, want %v", c.Args, want)
	}
	if job.Spec.ActiveDeadlineSeconds == nil || *job.Spec.ActiveDeadlineSeconds <= 240 {
		t.Errorf("activeDeadlineSeconds %v: Kubernetes would stop the Job before it says what is left", job.Spec.ActiveDeadlineSeconds)
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("the container does not meet Pod Security restricted: %+v", sc)
	}
}

// The hook follows the values: the operator's namespace, image, pull policy,
// node selector and tolerations, and uninstall.timeoutSeconds.
func TestUninstallHookFollowsValues(t *testing.T) {
	objs := renderHook(t, "--set", "namespace.name=gpu-slicer", "--set", "images.operator=registry.example.com/op:v9",
		"--set", "operator.imagePullPolicy=Never", "--set", "operator.nodeSelector.pool=infra",
		"--set", "operator.tolerations[0].key=infra", "--set", "operator.tolerations[0].operator=Exists",
		"--set", "uninstall.timeoutSeconds=900")
	job := convert[batchv1.Job](t, objs[len(objs)-1])
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	if job.Namespace != "gpu-slicer" || c.Image != "registry.example.com/op:v9" || c.ImagePullPolicy != "Never" {
		t.Errorf("Job %s/%s runs %s (%s)", job.Namespace, job.Name, c.Image, c.ImagePullPolicy)
	}
	if pod.NodeSelector["pool"] != "infra" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "infra" {
		t.Errorf("node selector %v, tolerations %v", pod.NodeSelector, pod.Tolerations)
	}
	if !slices.Contains(c.Args, "--timeout=900s") || *job.Spec.ActiveDeadlineSeconds <= 900 {
		t.Errorf("args %v, deadline %d", c.Args, *job.Spec.ActiveDeadlineSeconds)
	}
	if sub := str(objs[2], "kind"); sub != "ClusterRoleBinding" || dig(objs[2], "subjects").([]any)[0].(obj)["namespace"] != "gpu-slicer" {
		t.Errorf("binding: %v", objs[2])
	}
}
