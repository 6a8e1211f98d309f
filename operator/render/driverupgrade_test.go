package render

import (
	"strings"
	"testing"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// The Module's version is a digest of what KMM loads: a change of the driver is a new
// version, reverting it the old one, and what KMM does not load changes nothing.
func TestModuleVersion(t *testing.T) {
	version := func(mutate ...func(*slicerv1alpha1.Slicer)) string {
		t.Helper()
		v, err := DriverVersion(testOptions(mutate...))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	base := version()
	if len(base) != 12 {
		t.Fatalf("version %q: want 12 hex digits (a label value)", base)
	}
	m, err := Module(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if m.Spec.ModuleLoader.Container.Version != base || ModuleVersion(m.Spec.ModuleLoader.Container) != base {
		t.Errorf("Module version %q, digest %q, want %q", m.Spec.ModuleLoader.Container.Version, ModuleVersion(m.Spec.ModuleLoader.Container), base)
	}
	image := func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Image = "reg/driver:580.95.05-${KERNEL_FULL_VERSION}" }
	for name, change := range map[string]func(*slicerv1alpha1.Slicer){
		"image": image,
		"kernel mappings": func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.KernelMappings = []slicerv1alpha1.KernelMapping{{Regexp: `^6\.`}}
		},
		"build": func(s *slicerv1alpha1.Slicer) {
			s.Spec.Driver.Build = &slicerv1alpha1.DriverBuildSpec{State: slicerv1alpha1.FeatureEnabled}
		},
		"modules removed": func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.InTreeModulesToRemove = []string{"nouveau", "nvidiafb"} },
	} {
		if version(change) == base {
			t.Errorf("a change of the %s keeps the version", name)
		}
	}
	if first, again := version(image), version(image); first != again {
		t.Errorf("the version is not deterministic: %s, then %s", first, again)
	}
	for name, change := range map[string]func(*slicerv1alpha1.Slicer){
		"scheduler replicas": func(s *slicerv1alpha1.Slicer) { s.Spec.Scheduler.Replicas = 3 },
		"upgrade policy":     func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Upgrade.MaxUnavailable = 3 },
	} {
		if version(change) != base {
			t.Errorf("a change of the %s is a new driver version", name)
		}
	}
}

// KMM's version labels name the Module within 63 characters: a longer agent namespace gets no
// ordered upgrade (no version, no agent term), and says so (controller).
func TestOrderedUpgradeNeedsShortNames(t *testing.T) {
	o := testOptions()
	if !OrderedUpgrade(o) {
		t.Fatal("no ordered upgrade for slicer-agent")
	}
	if got := KMMModuleVersionLabel(o.AgentNamespace, ModuleName); got != "kmm.node.kubernetes.io/version-module.slicer-agent.slicer-nvidia" {
		t.Errorf("module version label %q", got)
	}
	if got := KMMWorkerVersionLabel(o.AgentNamespace, ModuleName); got != "beta.kmm.node.kubernetes.io/version-worker-pod.slicer-agent.slicer-nvidia" {
		t.Errorf("worker version label %q", got)
	}
	long := testOptions()
	long.AgentNamespace = strings.Repeat("n", 28)
	if OrderedUpgrade(long) {
		t.Error("ordered upgrade with a 28-character agent namespace")
	}
	if v, _ := DriverVersion(long); v != "" {
		t.Errorf("version %q without an ordered upgrade", v)
	}
	ok := testOptions()
	ok.AgentNamespace = strings.Repeat("n", 27)
	if !OrderedUpgrade(ok) {
		t.Error("no ordered upgrade with a 27-character agent namespace")
	}
	emulated := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated })
	if OrderedUpgrade(emulated) {
		t.Error("ordered upgrade without KMM")
	}
	for _, r := range AgentNodeAffinity(emulated).RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions {
		if r.Key == slicerv1alpha1.LabelDriverUpgrade {
			t.Error("the agent leaves upgraded nodes without KMM")
		}
	}
}

// KMM with emulated GPUs (hack/kmm/run.sh): the agent waits for KMM's ready label and leaves
// a node at the upgrade's Driver step like a real one, and emulates its GPUs, unprivileged.
func TestAgentKMMEmulated(t *testing.T) {
	objs, err := Agent(testOptions(func(s *slicerv1alpha1.Slicer) {
		s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 2}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := podTemplate(t, objs, "DaemonSet")
	if !contains(tmpl.Spec.Containers[0].Args, "--emulate=H100-80GB:2") {
		t.Errorf("args %v lack --emulate", tmpl.Spec.Containers[0].Args)
	}
	if p := tmpl.Spec.Containers[0].SecurityContext.Privileged; p != nil && *p {
		t.Error("an emulating agent is privileged")
	}
	keys := map[string]bool{}
	for _, r := range tmpl.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions {
		keys[r.Key] = true
	}
	if !keys[KMMReadyLabel("slicer-agent", ModuleName)] || !keys[slicerv1alpha1.LabelDriverUpgrade] {
		t.Errorf("affinity %v: want KMM's ready label and the upgrade's", keys)
	}
}
