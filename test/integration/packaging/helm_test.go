package packaging_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/releasehook"
	oprender "github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

// helmLabels are the labels the chart adds to what config/ renders (its
// _helpers.tpl); nothing else may differ from kustomize's output.
var helmLabels = []string{"app.kubernetes.io/managed-by", "helm.sh/chart"}

func helmBin() string {
	return filepath.Join(framework.RepoRoot(), "bin", "tools", "helm")
}

func chartDir() string {
	return filepath.Join(framework.RepoRoot(), "charts", "slicer")
}

// helmHome holds Helm's state (cache, config, data) for the Helm specs.
var helmHome string

// helm runs the pinned Helm with its state in helmHome; it returns the
// combined output and the error.
func helm(args ...string) (string, error) {
	home := helmHome
	cmd := exec.Command(helmBin(), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// helmTemplate renders the chart (CRDs included) with the release in
// namespace default.
func helmTemplate(args ...string) []*unstructured.Unstructured {
	out, err := helm(append([]string{"template", "slicer", chartDir(), "--include-crds", "--namespace", "default"}, args...)...)
	Expect(err).NotTo(HaveOccurred(), "helm template: %s", out)
	return decode([]byte(out))
}

// withoutHelmLabels drops the chart's own labels (and labels left empty).
func withoutHelmLabels(objs []*unstructured.Unstructured) map[string]map[string]any {
	byID := map[string]map[string]any{}
	for _, u := range objs {
		c := u.DeepCopy()
		labels := c.GetLabels()
		for _, l := range helmLabels {
			delete(labels, l)
		}
		if len(labels) == 0 {
			unstructured.RemoveNestedField(c.Object, "metadata", "labels")
		} else {
			c.SetLabels(labels)
		}
		byID[id(c)] = c.Object
	}
	return byID
}

// customValues change every value the chart has.
var customValues = []string{
	"--set", "namespace.name=gpu-slicer",
	"--set", "images.operator=registry.example.com:5000/slicer/operator:v9",
	"--set", "images.agent=registry.example.com/slicer/agent@sha256:" + strings.Repeat("a", 64),
	"--set", "operator.imagePullPolicy=Always",
	"--set", "operator.resources.requests.cpu=50m",
	"--set", "operator.nodeSelector.node-role\\.kubernetes\\.io/control-plane=",
	"--set", "operator.tolerations[0].key=node-role.kubernetes.io/control-plane",
	"--set", "operator.tolerations[0].operator=Exists",
	"--set", "operator.tolerations[0].effect=NoSchedule",
	"--set", "slicer.spec.driver.mode=Preinstalled",
	"--set", "slicer.spec.driver.inTreeModulesToRemove=null",
	"--set", "slicer.spec.controlPlane.avoidGPUNodes=Required",
	"--set", "slicer.spec.priority.criticalPriorityQuota=Enabled",
	"--set", "uninstall.timeoutSeconds=600",
}

var _ = Describe("Helm chart", Ordered, func() {
	BeforeAll(func() {
		helmHome = GinkgoT().TempDir()
		_, err := os.Stat(helmBin())
		Expect(err).NotTo(HaveOccurred(), "helm not built: run `make helm` (pinned in hack/tools/helm; make test-go builds it)")
	})

	It("passes helm lint --strict, with the default and with changed values", func() {
		out, err := helm("lint", "--strict", chartDir())
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = helm(append([]string{"lint", "--strict", chartDir()}, customValues...)...)
		Expect(err).NotTo(HaveOccurred(), out)
	})

	It("renders by default exactly what kustomize renders from config/default, but for the chart's labels and its pre-delete hook", func() {
		var release []*unstructured.Unstructured
		hooks := 0
		for _, u := range helmTemplate() {
			if u.GetAnnotations()["helm.sh/hook"] != "" {
				hooks++
				continue
			}
			release = append(release, u)
		}
		Expect(hooks).To(Equal(4), "the uninstall hook: ServiceAccount, ClusterRole, ClusterRoleBinding, Job")
		Expect(withoutHelmLabels(release)).To(Equal(withoutHelmLabels(render("default"))))
	})

	It("renders, with changed values, objects that pass a server-side dry run", func() {
		objs := helmTemplate(customValues...)
		kinds := map[string]int{}
		for _, u := range objs {
			kinds[u.GetKind()]++
			if u.GetKind() == "Namespace" {
				Expect(u.GetName()).To(Equal("gpu-slicer"))
				Expect(u.GetLabels()).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"))
				apply(u)
			}
		}
		Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", 3))
		for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service", "Slicer", "Job", "ResourceQuota"} {
			Expect(kinds).To(HaveKey(k))
		}
		for _, u := range objs {
			if u.GetKind() == "ServiceAccount" {
				apply(u)
			}
		}
		for _, u := range objs {
			Expect(dryRunApply(u)).To(Succeed(), "dry run of %s", id(u))
			switch u.GetKind() {
			case "ClusterRoleBinding", "RoleBinding":
				subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
				for _, s := range subjects {
					Expect(s).To(HaveKeyWithValue("namespace", "gpu-slicer"), id(u))
				}
			case "Namespace", "ClusterRole", "CustomResourceDefinition", "Slicer":
			default:
				Expect(u.GetNamespace()).To(Equal("gpu-slicer"), id(u))
			}
			if u.GetKind() == "Slicer" {
				Expect(u.Object["spec"]).To(HaveKeyWithValue("driver", map[string]any{"mode": "Preinstalled"}))
			}
			if u.GetKind() == "Job" {
				var j batchv1.Job
				Expect(k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &j)).To(Succeed())
				Expect(j.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.example.com:5000/slicer/operator:v9"))
				Expect(j.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--timeout=600s"))
				pod := podOf(j.Spec.Template, j.Namespace, j.Name+"-probe")
				Expect(k8s.Create(ctx, pod, client.DryRunAll)).To(Succeed(), "the uninstall hook's pod in a restricted namespace")
			}
			if u.GetKind() != "Deployment" {
				continue
			}
			d := toDeployment(u)
			spec := d.Spec.Template.Spec
			c := spec.Containers[0]
			Expect(c.Image).To(Equal("registry.example.com:5000/slicer/operator:v9"))
			Expect(c.ImagePullPolicy).To(Equal(corev1.PullAlways))
			Expect(c.Resources.Requests.Cpu().String()).To(Equal("50m"))
			Expect(c.Resources.Requests.Memory().String()).To(Equal("64Mi"), "the other defaults stay")
			Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "RELATED_IMAGE_AGENT", Value: "registry.example.com/slicer/agent@sha256:" + strings.Repeat("a", 64)}))
			Expect(spec.NodeSelector).To(Equal(map[string]string{"node-role.kubernetes.io/control-plane": ""}))
			Expect(spec.Tolerations).To(ConsistOf(corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}))
			// slicer.spec.controlPlane.avoidGPUNodes=Required holds the operator to it too.
			Expect(spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution).To(BeEmpty())
			Expect(spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal([]corev1.NodeSelectorTerm{oprender.AvoidGPUNodesTerm()}))
			pod := podOf(d.Spec.Template, d.Namespace, d.Name+"-probe")
			Expect(k8s.Create(ctx, pod, client.DryRunAll)).To(Succeed(), "operator pod in a restricted namespace")
		}
	})

	DescribeTable("rejects a bad value with a message",
		func(want string, args ...string) {
			out, err := helm(append([]string{"template", "slicer", chartDir(), "--namespace", "default"}, args...)...)
			Expect(err).To(HaveOccurred(), "helm template %v rendered:\n%s", args, out)
			Expect(out).To(ContainSubstring(want))
		},
		Entry("a namespace that is no DNS label", "/namespace/name", "--set", "namespace.name=Slicer_System"),
		Entry("a namespace whose agent namespace would be too long", "/namespace/name", "--set", "namespace.name="+strings.Repeat("n", 58)),
		Entry("an image reference with a space", "/images/webhook", "--set", "images.webhook=quay.io/slicer webhook"),
		Entry("an unknown pull policy", "/operator/imagePullPolicy", "--set", "operator.imagePullPolicy=Sometimes"),
		Entry("a resource quantity that is none", "/operator/resources/limits/memory", "--set", "operator.resources.limits.memory=lots"),
		Entry("a value the chart does not have", "replicas", "--set", "operator.replicas=2"),
		Entry("an uninstall hook timeout too short for any teardown", "/uninstall/timeoutSeconds", "--set", "uninstall.timeoutSeconds=1"),
		Entry("a driver mode the Slicer CRD does not have", "/slicer/spec/driver/mode", "--set", "slicer.spec.driver.mode=Magic"),
		Entry("creating the namespace the release is stored in", `namespace.create=true makes the chart create namespace "slicer-system"`, "--namespace", "slicer-system"),
	)

	It("installs into the apiserver, upgrades from the previous chart version without changing the operator's pod or the Slicer, and uninstalls to the CRDs", func() {
		dir := GinkgoT().TempDir()
		kubeconfig := filepath.Join(dir, "kubeconfig")
		Expect(os.WriteFile(kubeconfig, env.Environment.KubeConfig, 0o600)).To(Succeed())
		const ns = "slicer-helm"
		release := []string{"slicer", "--kubeconfig", kubeconfig, "--namespace", "default"}
		DeferCleanup(func() {
			_, _ = helm(append([]string{"uninstall"}, release...)...)
			_ = k8s.Delete(ctx, &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}})
		})
		// The previous chart version: the same chart under an older version
		// (what `helm upgrade` sees between releases that change nothing of
		// the operator's pod).
		previous := filepath.Join(dir, "previous")
		Expect(exec.Command("cp", "-r", chartDir(), previous).Run()).To(Succeed())
		chartYAML := filepath.Join(previous, "Chart.yaml")
		raw, err := os.ReadFile(chartYAML)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(chartYAML, bytes.Replace(raw, []byte("\nversion: "), []byte("\nversion: 0.0.1-previous+"), 1), 0o644)).To(Succeed())

		out, err := helm(append(append([]string{"install"}, release...), previous, "--set", "namespace.name="+ns)...)
		Expect(err).NotTo(HaveOccurred(), out)
		var d appsv1.Deployment
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slicer-operator"}, &d)).To(Succeed())
		var s slicerv1alpha1.Slicer
		Expect(k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &s)).To(Succeed())
		Expect(d.Labels["helm.sh/chart"]).To(HavePrefix("slicer-0.0.1-previous"))

		out, err = helm(append(append([]string{"upgrade"}, release...), chartDir(), "--set", "namespace.name="+ns)...)
		Expect(err).NotTo(HaveOccurred(), out)
		var d2 appsv1.Deployment
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slicer-operator"}, &d2)).To(Succeed())
		Expect(d2.Labels["helm.sh/chart"]).NotTo(HavePrefix("slicer-0.0.1-previous"), "the upgrade ran")
		Expect(d2.Generation).To(Equal(d.Generation), "the upgrade changed the operator's Deployment spec, so its pod would be replaced")
		var s2 slicerv1alpha1.Slicer
		Expect(k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &s2)).To(Succeed())
		Expect(s2.Generation).To(Equal(s.Generation), "the upgrade changed the Slicer's spec")

		// This apiserver runs no Job controller: the spec plays it for the pre-delete hook,
		// running its subcommand's code as the hook's ServiceAccount (the chart's RBAC, real
		// authorization) and then marking the Job complete, as the controller would.
		hookDone := make(chan error, 1)
		go func() { hookDone <- playUninstallHook(ns, "slicer", "default") }()
		out, err = helm(append([]string{"uninstall", "--timeout", "2m"}, release...)...)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(<-hookDone).To(Succeed())
		for _, o := range []client.Object{
			&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slicer-uninstall-slicer"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slicer-uninstall-slicer"}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "slicer-uninstall-slicer"}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "slicer-uninstall-slicer"}},
		} {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the hook's %T %s is left: %v", o, o.GetName(), err)
		}
		// Left: the CRDs (Helm never deletes crds/) and the namespace, which
		// this apiserver without kube-controller-manager only marks deleted.
		for _, crd := range []string{"slicers.slicer.dev", "nodeaccelerators.slicer.dev", "sliceallocations.slicer.dev"} {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("apiextensions.k8s.io/v1")
			u.SetKind("CustomResourceDefinition")
			Expect(k8s.Get(ctx, client.ObjectKey{Name: crd}, u)).To(Succeed(), "Helm keeps the CRD %s", crd)
		}
		var nsObj corev1.Namespace
		if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err == nil {
			Expect(nsObj.DeletionTimestamp).NotTo(BeNil(), "namespace %s not deleted", ns)
		}
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{}))).To(BeTrue(), "the Slicer is left")
		for _, o := range []struct{ kind, name string }{
			{"ClusterRole", "slicer-operator"}, {"ClusterRole", "slicer-metrics-reader"}, {"ClusterRoleBinding", "slicer-operator"},
		} {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("rbac.authorization.k8s.io/v1")
			u.SetKind(o.kind)
			err := k8s.Get(ctx, client.ObjectKey{Name: o.name}, u)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s is left: %v", o.kind, o.name, err)
		}
	})
})

// playUninstallHook does what the Job controller and the hook's pod would for
// the chart's pre-delete hook of release: it waits for the Job, runs
// releasehook.Run impersonating the Job's ServiceAccount, and records the
// Job's outcome in its status, which is what helm uninstall waits on.
func playUninstallHook(ns, release, releaseNS string) error {
	var j batchv1.Job
	key := client.ObjectKey{Namespace: ns, Name: "slicer-uninstall-" + release}
	deadline := time.Now().Add(time.Minute)
	for k8s.Get(ctx, key, &j) != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("no Job %s", key)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sa := j.Spec.Template.Spec.ServiceAccountName
	c, err := client.New(framework.ImpersonatedConfig(env.Config, ns, sa), client.Options{Scheme: env.Scheme})
	if err != nil {
		return err
	}
	var log bytes.Buffer
	runErr := releasehook.Run(ctx, c, releasehook.Options{ReleaseName: release, ReleaseNamespace: releaseNS,
		Finalizer: controller.Finalizer, Timeout: 30 * time.Second, Poll: 200 * time.Millisecond}, &log)
	GinkgoWriter.Printf("uninstall hook as %s/%s: %v\n%s", ns, sa, runErr, log.String())
	now := metav1.Now()
	j.Status.StartTime = &now
	outcome := batchv1.JobComplete
	if runErr != nil {
		outcome = batchv1.JobFailed
		j.Status.Failed = 1
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now})
	} else {
		j.Status.Succeeded = 1
		j.Status.CompletionTime = &now
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now})
	}
	j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: outcome, Status: corev1.ConditionTrue, Reason: "Played", LastTransitionTime: now})
	if err := k8s.Status().Update(ctx, &j); err != nil {
		return errors.Join(runErr, fmt.Errorf("record the Job's outcome: %w", err))
	}
	return runErr
}
