package render

import (
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/internal/kubeversion"
)

func testSchedulerImages() map[kubeversion.Minor]string {
	out := map[kubeversion.Minor]string{}
	for _, m := range kubeversion.Supported {
		out[m] = "reg/sched:v1-k8s-" + m.String()
	}
	return out
}

func onMinor(o Options, minor int, git string) Options {
	o.Kubernetes = kubeversion.Version{Minor: kubeversion.Minor{Major: 1, Minor: minor}, GitVersion: git}
	return o
}

// One scheduler build description per supported minor, no more, no less.
func TestSchedulerMinorsCoverSupported(t *testing.T) {
	var got []string
	for m := range schedulerMinors {
		got = append(got, m.String())
	}
	sort.Strings(got)
	var want []string
	for _, m := range kubeversion.Supported {
		want = append(want, m.String())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("schedulerMinors vs kubeversion.Supported (-supported +described):\n%s", diff)
	}
}

// schedulerParts renders the scheduler for o and returns its image, its
// parsed configuration and its ClusterRole rules as group/resource:verb.
func schedulerParts(t *testing.T, o Options) (string, map[string]any, map[string]bool) {
	t.Helper()
	objs, err := Scheduler(o)
	if err != nil {
		t.Fatal(err)
	}
	var image string
	var cfg map[string]any
	for _, obj := range objs {
		switch x := obj.(type) {
		case *appsv1.Deployment:
			image = x.Spec.Template.Spec.Containers[0].Image
		case *corev1.ConfigMap:
			if err := yaml.Unmarshal([]byte(x.Data[schedulerConfigKey]), &cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	perms := map[string]bool{}
	for _, obj := range RBAC(o) {
		if cr, ok := obj.(*rbacv1.ClusterRole); ok && cr.Name == SchedulerName {
			for _, r := range cr.Rules {
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						for _, v := range r.Verbs {
							perms[g+"/"+res+":"+v] = true
						}
					}
				}
			}
		}
	}
	return image, cfg, perms
}

func perms(group string, resources []string, verbs ...string) []string {
	var out []string
	for _, r := range resources {
		for _, v := range verbs {
			out = append(out, group+"/"+r+":"+v)
		}
	}
	return out
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func minus(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Each minor gets its own image, the configuration its kube-scheduler
// decodes, and the DRA rules of its own system:kube-scheduler role.
func TestSchedulerPerMinor(t *testing.T) {
	read := []string{"get", "list", "watch"}
	dra135 := append(append(
		perms("resource.k8s.io", []string{"deviceclasses", "resourceslices"}, read...),
		perms("resource.k8s.io", []string{"resourceclaims", "resourceclaims/status"}, "get", "list", "watch", "update", "patch")...),
		perms("", []string{"pods/finalizers"}, "update")...)
	sort.Strings(dra135)
	basePlugins := []string{"bind", "filter", "multiPoint", "permit", "postBind", "postFilter", "preBind", "preEnqueue", "preFilter", "preScore", "queueSort", "reserve", "score"}
	cases := []struct {
		minor       int
		git         string
		wantImage   string
		morePlugins []string
		// wantAdded are the permissions this minor adds to the previous one.
		wantAdded []string
	}{
		{minor: 35, git: "v1.35.4", wantImage: "reg/sched:v1-k8s-1.35", wantAdded: nil},
		{minor: 36, git: "v1.36.3", wantImage: "reg/sched:v1-k8s-1.36", morePlugins: []string{"placementGenerate", "placementScore"},
			wantAdded: append(perms("resource.k8s.io", []string{"resourceclaims"}, "create", "delete"), perms("resource.k8s.io", []string{"resourceclaims/binding"}, "update", "patch")...)},
		{minor: 37, git: "v1.37.2", wantImage: "reg/sched:v1-k8s-1.37", morePlugins: []string{"placementGenerate", "placementScore", "podGroupPostFilter"},
			wantAdded: perms("resource.k8s.io", []string{"devicetaintrules"}, read...)},
	}
	var prevPerms map[string]bool
	var prevCfg map[string]any
	for _, tc := range cases {
		o := onMinor(testOptions(), tc.minor, tc.git)
		image, cfg, got := schedulerParts(t, o)
		if image != tc.wantImage {
			t.Errorf("1.%d: image %q, want %q", tc.minor, image, tc.wantImage)
		}
		if cfg["apiVersion"] != "kubescheduler.config.k8s.io/v1" {
			t.Errorf("1.%d: apiVersion %v", tc.minor, cfg["apiVersion"])
		}
		plugins := cfg["profiles"].([]any)[0].(map[string]any)["plugins"].(map[string]any)
		wantPlugins := append(append([]string{}, basePlugins...), tc.morePlugins...)
		sort.Strings(wantPlugins)
		if diff := cmp.Diff(wantPlugins, keysOf(plugins)); diff != "" {
			t.Errorf("1.%d: extension points in the configuration (-want +got):\n%s", tc.minor, diff)
		}
		if prevCfg != nil {
			// Apart from the empty extension points, the configurations are the same.
			trimmed := map[string]any{}
			if err := yaml.Unmarshal(mustYAML(t, cfg), &trimmed); err != nil {
				t.Fatal(err)
			}
			tp := trimmed["profiles"].([]any)[0].(map[string]any)["plugins"].(map[string]any)
			for _, k := range tc.morePlugins {
				delete(tp, k)
			}
			pp := prevCfg["profiles"].([]any)[0].(map[string]any)["plugins"].(map[string]any)
			for k := range pp {
				if !contains(basePlugins, k) {
					delete(pp, k)
				}
			}
			if diff := cmp.Diff(prevCfg, trimmed); diff != "" {
				t.Errorf("1.%d: configuration differs from the previous minor's beyond empty extension points:\n%s", tc.minor, diff)
			}
		}
		var dra []string
		for p := range got {
			if strings.HasPrefix(p, "resource.k8s.io/") || strings.HasPrefix(p, "/pods/finalizers") {
				dra = append(dra, p)
			}
		}
		sort.Strings(dra)
		if prevPerms == nil {
			if diff := cmp.Diff(dra135, dra); diff != "" {
				t.Errorf("1.35 DRA permissions (-want +got):\n%s", diff)
			}
		} else {
			want := append([]string{}, tc.wantAdded...)
			sort.Strings(want)
			if diff := cmp.Diff(want, minus(got, prevPerms)); diff != "" {
				t.Errorf("1.%d: permissions added to 1.%d (-want +got):\n%s", tc.minor, tc.minor-1, diff)
			}
			if lost := minus(prevPerms, got); len(lost) > 0 {
				t.Errorf("1.%d: permissions lost from 1.%d: %v", tc.minor, tc.minor-1, lost)
			}
		}
		prevPerms, prevCfg = got, cfg
	}
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// On a minor without a scheduler build nothing of the scheduler is
// rendered, its objects and the webhook registration are listed for
// removal, and the admission policy rejects MIG pods naming the version.
func TestUnsupportedMinor(t *testing.T) {
	for _, tc := range []struct {
		minor int
		git   string
	}{{34, "v1.34.4"}, {38, "v1.38.0"}} {
		o := onMinor(testOptions(), tc.minor, tc.git)
		if SchedulerSupported(o) {
			t.Fatalf("%s supported", tc.git)
		}
		if _, err := Scheduler(o); err == nil || !strings.Contains(err.Error(), tc.git) {
			t.Errorf("%s: Scheduler error %v, want one naming the version", tc.git, err)
		}
		for _, obj := range RBAC(o) {
			if obj.GetName() == SchedulerName {
				t.Errorf("%s: scheduler RBAC rendered: %T", tc.git, obj)
			}
		}
		var removed []string
		for _, obj := range Removed(o) {
			removed = append(removed, obj.GetObjectKind().GroupVersionKind().Kind+" "+client.ObjectKeyFromObject(obj).String())
		}
		want := []string{
			"MutatingWebhookConfiguration /slicer-mig-pods",
			"Deployment slicer-system/slicer-scheduler",
			"PodDisruptionBudget slicer-system/slicer-scheduler",
			"ConfigMap slicer-system/slicer-scheduler-config",
			"ServiceAccount slicer-system/slicer-scheduler",
			"RoleBinding slicer-system/slicer-scheduler",
			"Role slicer-system/slicer-scheduler",
			"ClusterRoleBinding /slicer-scheduler",
			"ClusterRole /slicer-scheduler",
		}
		if diff := cmp.Diff(want, removed); diff != "" {
			t.Errorf("%s: removed (-want +got):\n%s", tc.git, diff)
		}
		adm, err := WebhookAdmission(o, Admission)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, obj := range adm {
			kinds = append(kinds, obj.GetObjectKind().GroupVersionKind().Kind)
		}
		if diff := cmp.Diff([]string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, kinds); diff != "" {
			t.Fatalf("%s: admission kinds (-want +got):\n%s", tc.git, diff)
		}
		vap := adm[0].(*admissionregistrationv1.ValidatingAdmissionPolicy)
		// The rejection, and the reserved keys on UPDATE every form of the policy holds.
		if len(vap.Spec.Validations) != 2 || !strings.Contains(vap.Spec.Validations[0].Message, tc.git) || !strings.Contains(vap.Spec.Validations[0].Message, "1.35 to 1.37") {
			t.Errorf("%s: validations %+v", tc.git, vap.Spec.Validations)
		}
	}
	// Supported: nothing to remove, the full admission set.
	if r := Removed(testOptions()); len(r) != 0 {
		t.Errorf("supported minor removes %d objects", len(r))
	}
}

// A missing image for a supported minor is an error naming its variable,
// never an empty image.
func TestSchedulerImageMissing(t *testing.T) {
	o := testOptions()
	o.Images.Schedulers = map[kubeversion.Minor]string{{Major: 1, Minor: 36}: "reg/sched:x"}
	if _, err := Scheduler(o); err == nil || !strings.Contains(err.Error(), "RELATED_IMAGE_SCHEDULER_K8S_1_37") {
		t.Errorf("err = %v", err)
	}
}

// Dropping an extension point a minor does not know is only allowed while
// it is empty: plugins configured there would be lost silently.
func TestForMinorRefusesToDropPlugins(t *testing.T) {
	raw := []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    placementScore:\n      enabled:\n      - name: X\n")
	m := kubeversion.Minor{Major: 1, Minor: 35}
	if _, err := schedulerMinors[m].forMinor(raw, m); err == nil || !strings.Contains(err.Error(), "placementScore") {
		t.Errorf("err = %v", err)
	}
	if _, err := schedulerMinors[m].forMinor([]byte("apiVersion: kubescheduler.config.k8s.io/v2\n"), m); err == nil {
		t.Error("another API version accepted")
	}
}
