package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

const (
	// the chart packaged as the version before the current one (docs/install.md, Helm)
	previousChartVersion = "0.1.99"
	demoNamespace        = "slicer-demo"
	helmRelease          = "slicer"
	// where the release record lives: not the operator's namespace, which the chart creates
	helmReleaseNamespace = "default"
)

// helmSpec is the chart's end-to-end run (issue 30, "done when"): on the node the suite's
// earlier specs ran on, after the uninstall spec removed the Slicer and hack/demo uninstall
// the rest of the kustomize install, Slicer is installed with `helm install` of the previous
// chart version, becomes Available, and the demo workload gets its slices; `helm upgrade` to
// the current chart with those pods running changes no pod and no slice; a plain `helm
// uninstall` with the Slicer there and its pods running under uninstall policy Wait fails, its
// pre-delete hook's message naming the pods, and removes nothing; with policy Force, `helm
// uninstall` again (the hook waits for the operator's teardown) leaves, of everything that
// names Slicer, only the CRDs Helm keeps.
func helmSpec(ctx SpecContext) {
	step := stepTimer()
	By("removing the rest of the kustomize install (config/overlays/emulated): operator, RBAC, namespace, CRDs")
	runScript(ctx, "hack/demo", "uninstall")
	Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: "slicers.slicer.dev"}, crdObject()))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "the kustomize install's CRDs stay")
	baseline, err := slicerObjects(ctx)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("before helm install, objects that name Slicer (the diff base): %d\n%s\n", len(baseline), strings.Join(sortedKeys(baseline), "\n"))
	step("kustomize uninstall")

	h := newHelm(GinkgoT().TempDir())
	current := chartVersion(filepath.Join(repoRoot, "charts", "slicer"))
	previous := previousChart(h.dir)
	values := localNodeValues(h.dir)

	By("helm install of the previous chart version (charts/slicer as " + previousChartVersion + ")")
	h.run(ctx, "install", helmRelease, previous, "-f", values)
	Expect(operatorChartLabel(ctx)).To(Equal("slicer-" + previousChartVersion))
	waitSlicerAvailable(ctx, 5*time.Minute)
	step("helm install → Slicer Available")

	By("the demo workload (examples/demo-workload.yaml) runs with its slices")
	runDemoWorkload(ctx)
	step("demo workload Running")

	By("helm upgrade to the current chart (" + current + ") with the slice pods running: no pod, no slice changes")
	before, err := takeUpgradeSnapshot(ctx)
	Expect(err).NotTo(HaveOccurred())
	Expect(before.pods).To(HaveKey(HavePrefix(demoNamespace+"/")), "no demo pod in the snapshot")
	h.run(ctx, "upgrade", helmRelease, filepath.Join(repoRoot, "charts", "slicer"), "-f", values)
	Expect(operatorChartLabel(ctx)).To(Equal("slicer-"+current), "the upgrade did not run")
	Consistently(func(g Gomega) {
		after, err := takeUpgradeSnapshot(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(after).To(Equal(before))
	}).WithContext(ctx).WithTimeout(20 * time.Second).WithPolling(2 * time.Second).Should(Succeed())
	Expect(checkInvariants(ctx)).To(Succeed())
	waitSlicerAvailable(ctx, 10*time.Second)
	step("helm upgrade, 20 s unchanged")

	By("helm uninstall with the Slicer and the demo's pods there, uninstall policy Wait: the pre-delete hook fails naming the pods, and nothing is deleted")
	out, err := h.runErr(ctx, "uninstall", helmRelease)
	Expect(err).To(HaveOccurred(), "helm uninstall succeeded while pods held MIG slices under policy Wait:\n%s", out)
	Expect(out).To(ContainSubstring("SlicesReleased=False ("+slicerv1alpha1.ReasonWaitingForPods+")"), "Helm does not print what the hook found")
	Expect(out).To(ContainSubstring(demoNamespace+"/"), "the hook's message names no demo pod")
	var s slicerv1alpha1.Slicer
	Expect(k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &s)).To(Succeed())
	Expect(s.DeletionTimestamp).NotTo(BeNil(), "the hook did not delete the Slicer")
	Expect(operatorChartLabel(ctx)).To(Equal("slicer-"+current), "the operator went with the hook failing")
	Expect(checkInvariants(ctx)).To(Succeed())
	step("helm uninstall refused under Wait")

	By("uninstall policy Force, then a plain helm uninstall again: the hook waits for the teardown (the demo's pods go, the agent releases their slices), then Helm removes the rest")
	patch := client.MergeFrom(s.DeepCopy())
	s.Spec.Uninstall.Policy = slicerv1alpha1.UninstallForce
	Expect(k8s.Patch(ctx, &s, patch)).To(Succeed())
	h.run(ctx, "uninstall", helmRelease)
	Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{}))).To(BeTrue(), "the Slicer outlived helm uninstall")
	expectNoSliceLeft(ctx)
	deleteNamespace(ctx, demoNamespace)
	want := keptByHelm(ctx)
	Eventually(func(g Gomega) {
		after, err := slicerObjects(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		var left []string
		for _, k := range sortedKeys(after) {
			if _, ok := baseline[k]; !ok {
				left = append(left, after[k])
			}
		}
		g.Expect(left).To(ConsistOf(want), "objects that name Slicer left after helm uninstall (Helm keeps crds/ only)")
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	step("plain helm uninstall (Force): only the CRDs left")
}

// stepTimer prints the time each step of the spec took (docs/install.md quotes them).
func stepTimer() func(string) {
	last := time.Now()
	return func(what string) {
		GinkgoWriter.Printf("helm spec: %s: %s\n", what, time.Since(last).Round(100*time.Millisecond))
		last = time.Now()
	}
}

// helmRun is the pinned Helm (bin/tools/helm, hack/tools/helm) against the local node, with its
// state in a folder of its own and the suite's post-renderer plugin
// (testdata/helm-plugins/loopback: config/overlays/emulated's operator and namespace patches).
type helmRun struct{ dir string }

func newHelm(dir string) helmRun { return helmRun{dir: dir} }

func (h helmRun) run(ctx context.Context, args ...string) {
	out, err := h.runErr(ctx, args...)
	Expect(err).NotTo(HaveOccurred(), "helm %s:\n%s", args[0], out)
}

// runErr runs Helm and returns its combined output and error.
func (h helmRun) runErr(ctx context.Context, args ...string) (string, error) {
	args = append(args, "--kubeconfig", kubeconfig, "--namespace", helmReleaseNamespace)
	if args[0] == "install" || args[0] == "upgrade" {
		args = append(args, "--post-renderer", "loopback", "--post-renderer-args", repoRoot)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "bin", "tools", "helm"), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(h.dir, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.dir, "config"),
		"HELM_DATA_HOME="+filepath.Join(h.dir, "data"),
		"HELM_PLUGINS="+filepath.Join(repoRoot, "test", "e2e", "testdata", "helm-plugins"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	GinkgoWriter.Printf("$ helm %s (%s)\n%s\n", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String())
	return out.String(), err
}

func chartVersion(dir string) string {
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var c struct {
		Version string `json:"version"`
	}
	Expect(yaml.Unmarshal(raw, &c)).To(Succeed())
	Expect(c.Version).NotTo(BeEmpty())
	return c.Version
}

// previousChart is charts/slicer as if released before: the same files, Chart.yaml's version
// and appVersion set to previousChartVersion (what test/olm does with its "previous" bundle).
func previousChart(dir string) string {
	dst := filepath.Join(dir, "slicer-"+previousChartVersion)
	Expect(exec.Command("cp", "-r", filepath.Join(repoRoot, "charts", "slicer"), dst).Run()).To(Succeed())
	path := filepath.Join(dst, "Chart.yaml")
	raw, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	var c map[string]any
	Expect(yaml.Unmarshal(raw, &c)).To(Succeed())
	c["version"], c["appVersion"] = previousChartVersion, previousChartVersion
	raw, err = yaml.Marshal(c)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(path, raw, 0o644)).To(Succeed())
	return dst
}

// localNodeValues writes the values for the local node, all read from config/overlays/emulated
// so that Helm installs what the kustomize install did: the images (the overlay's images
// transformer and its RELATED_IMAGE_* variables, images/local.sh's localhost/...:dev),
// imagePullPolicy Never, and the overlay's Slicer patch as slicer.spec (Helm merges it into the
// chart's default, the sample, as kustomize merges it into config/samples).
func localNodeValues(dir string) string {
	overlay := filepath.Join(repoRoot, "config", "overlays", "emulated")
	var kust struct {
		Images []struct{ NewName, NewTag string } `json:"images"`
	}
	readYAML(filepath.Join(overlay, "kustomization.yaml"), &kust)
	Expect(kust.Images).To(HaveLen(1))
	images := map[string]any{"operator": kust.Images[0].NewName + ":" + kust.Images[0].NewTag}
	var op appsv1.Deployment
	readYAML(filepath.Join(overlay, "operator.yaml"), &op)
	for _, e := range op.Spec.Template.Spec.Containers[0].Env {
		if k, ok := strings.CutPrefix(e.Name, "RELATED_IMAGE_"); ok {
			images[strings.ToLower(k)] = e.Value
		}
	}
	var s map[string]any
	readYAML(filepath.Join(overlay, "slicer.yaml"), &s)
	values := map[string]any{
		// the pre-delete hook's wait: long enough for the Force teardown of the demo's pods
		// (under 25 s with Helm's own deletions in CI's runs), short enough that the spec sees it
		// fail under Wait without waiting out the chart's default
		"uninstall": map[string]any{"timeoutSeconds": 45},
		"images":    images,
		"operator":  map[string]any{"imagePullPolicy": string(corev1.PullNever)},
		"slicer":    map[string]any{"spec": s["spec"]},
	}
	raw, err := yaml.Marshal(values)
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, "local-node-values.yaml")
	Expect(os.WriteFile(path, raw, 0o644)).To(Succeed())
	GinkgoWriter.Printf("helm values for the local node:\n%s\n", raw)
	return path
}

func readYAML(path string, into any) {
	raw, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	Expect(yaml.Unmarshal(raw, into)).To(Succeed(), path)
}

// operatorChartLabel is the helm.sh/chart label of the operator's Deployment: the chart
// version of the release that last applied it.
func operatorChartLabel(ctx context.Context) string {
	var d appsv1.Deployment
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "slicer-operator"}, &d)).To(Succeed())
	return d.Labels["helm.sh/chart"]
}

func waitSlicerAvailable(ctx context.Context, timeout time.Duration) {
	Eventually(func(g Gomega) {
		var s slicerv1alpha1.Slicer
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &s)).To(Succeed())
		c := meta.FindStatusCondition(s.Status.Conditions, slicerv1alpha1.ConditionAvailable)
		g.Expect(c).NotTo(BeNil(), "no Available condition yet")
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "Available: %s %s", c.Reason, c.Message)
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(time.Second).Should(Succeed())
}

// runDemoWorkload creates examples/demo-workload.yaml's namespace and pods, one pod at a time
// as `make demo` does (the same placements on every run), and checks that each pod runs with
// its own slice: its allocation Ready, of the profile it asked for, and its container given
// that MIG device (CDI's environment, printed by the container); then I1–I4.
func runDemoWorkload(ctx context.Context) {
	f, err := os.Open(filepath.Join(repoRoot, "examples", "demo-workload.yaml"))
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	currentGroup = "demo workload (helm install)"
	profiles := map[string]string{}
	var order []string
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else {
			Expect(err).NotTo(HaveOccurred())
		}
		switch u.GetKind() {
		case "Namespace":
			createNamespace(ctx, u.GetName())
		case "Pod":
			var p corev1.Pod
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)).To(Succeed())
			for r := range p.Spec.Containers[0].Resources.Limits {
				if profile, ok := strings.CutPrefix(string(r), mig.NVIDIAResourcePrefix); ok {
					profiles[p.Name] = profile
				}
			}
			createPod(ctx, &p)
			waitRunning(ctx, p.Namespace, p.Name)
			order = append(order, p.Name)
		default:
			Fail("examples/demo-workload.yaml: unexpected " + u.GetKind())
		}
	}
	Expect(order).NotTo(BeEmpty())
	allocs := allocationsIn(ctx, demoNamespace)
	Expect(allocs).To(HaveLen(len(order)))
	for _, a := range allocs {
		Expect(a.Status.State).To(Equal(slicerv1alpha1.AllocationReady), "allocation of %s", a.Spec.PodName)
		Expect(string(a.Spec.Profile)).To(Equal(profiles[a.Spec.PodName]), "allocation of %s", a.Spec.PodName)
		want := fmt.Sprintf("got MIG device %s (profile %s, placement %d:%d, GPU %s;",
			a.Status.MIGDeviceUUID, a.Spec.Profile, a.Spec.Placement.Start, a.Spec.Placement.Size, a.Spec.GPUUUID)
		Eventually(func() (string, error) {
			raw, err := clientset.CoreV1().Pods(demoNamespace).GetLogs(a.Spec.PodName, &corev1.PodLogOptions{}).DoRaw(ctx)
			return string(raw), err
		}).WithContext(ctx).WithTimeout(30*time.Second).Should(ContainSubstring(want), "pod %s", a.Spec.PodName)
	}
	Eventually(checkInvariants).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

// upgradeSnapshot is what a chart upgrade must not change: every pod of Slicer and of the demo
// (UID and each container's restart count), every allocation of the demo (UID, spec, device,
// state), the emulated GPUs' MIG instances (the agent's host state), and the generation of
// every workload object of Slicer and of the Slicer resource.
type upgradeSnapshot struct {
	pods        map[string]string
	allocations map[string]string
	instances   []string
	generations map[string]int64
}

func takeUpgradeSnapshot(ctx context.Context) (upgradeSnapshot, error) {
	s := upgradeSnapshot{pods: map[string]string{}, allocations: map[string]string{}, generations: map[string]int64{}}
	for _, ns := range []string{operatorNamespace, operatorNamespace + "-agent", demoNamespace} {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return s, err
		}
		for _, p := range pods.Items {
			restarts := []string{}
			for _, c := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
				restarts = append(restarts, fmt.Sprintf("%s:%d", c.Name, c.RestartCount))
			}
			s.pods[ns+"/"+p.Name] = fmt.Sprintf("uid %s phase %s restarts %v", p.UID, p.Status.Phase, restarts)
		}
		var deps appsv1.DeploymentList
		if err := k8s.List(ctx, &deps, client.InNamespace(ns)); err != nil {
			return s, err
		}
		for _, d := range deps.Items {
			s.generations["Deployment "+ns+"/"+d.Name] = d.Generation
		}
		var dss appsv1.DaemonSetList
		if err := k8s.List(ctx, &dss, client.InNamespace(ns)); err != nil {
			return s, err
		}
		for _, d := range dss.Items {
			s.generations["DaemonSet "+ns+"/"+d.Name] = d.Generation
		}
	}
	for _, a := range allocationsIn(ctx, demoNamespace) {
		// The spec by value: its placement is a pointer, whose address differs between reads.
		spec := a.Spec
		spec.Placement = nil
		s.allocations[a.Name] = fmt.Sprintf("uid %s spec %+v slot %s device %s state %s", a.UID, spec, migapi.SlotAsWritten(&a.Spec), a.Status.MIGDeviceUUID, a.Status.State)
	}
	v, err := readDeviceView(ctx)
	if err != nil {
		return s, err
	}
	for _, i := range v.instances {
		s.instances = append(s.instances, fmt.Sprintf("%+v", i))
	}
	slices.Sort(s.instances)
	var slicer slicerv1alpha1.Slicer
	if err := k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicer); err != nil {
		return s, err
	}
	s.generations["Slicer default"] = slicer.Generation
	return s, nil
}

// keptByHelm is what the chart leaves by design, as slicerObjects names it: the CRDs of its
// crds/ folder (Helm never deletes them) and, for each group version they serve, the
// APIService kube-apiserver registers itself for CRDs (labelled
// kube-aggregator.kubernetes.io/automanaged; it goes with the last CRD of the group version).
func keptByHelm(ctx context.Context) []string {
	files, err := filepath.Glob(filepath.Join(repoRoot, "charts", "slicer", "crds", "*.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(files).NotTo(BeEmpty())
	var names []string
	apiServices := map[string]bool{}
	for _, f := range files {
		var crd struct {
			Metadata struct{ Name string } `json:"metadata"`
			Spec     struct {
				Group    string `json:"group"`
				Versions []struct {
					Name   string `json:"name"`
					Served bool   `json:"served"`
				} `json:"versions"`
			} `json:"spec"`
		}
		readYAML(f, &crd)
		names = append(names, "customresourcedefinitions.apiextensions.k8s.io "+crd.Metadata.Name)
		for _, v := range crd.Spec.Versions {
			if v.Served {
				apiServices[v.Name+"."+crd.Spec.Group] = true
			}
		}
	}
	for name := range apiServices {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apiregistration.k8s.io/v1")
		u.SetKind("APIService")
		Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, u)).To(Succeed())
		Expect(u.GetLabels()).To(HaveKey("kube-aggregator.kubernetes.io/automanaged"), "APIService %s is not the apiserver's own", name)
		names = append(names, "apiservices.apiregistration.k8s.io "+name)
	}
	return names
}

func crdObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	return u
}
