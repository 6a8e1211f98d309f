package render

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	drivercontainer "github.com/slicer-operator/slicer/driver-container"
	"github.com/slicer-operator/slicer/internal/mig"
)

// The NFD rule matches exactly the PCI ids of internal/mig's models, and
// labels each model with its own name.
func TestNodeFeatureRuleMatchesModelTables(t *testing.T) {
	rule, err := NodeFeatureRule(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	var all []string
	for _, m := range mig.Models() {
		for _, id := range m.PCIDeviceIDs() {
			want[m.String()] = append(want[m.String()], fmt.Sprintf("%04x", id))
			all = append(all, fmt.Sprintf("%04x", id))
		}
	}
	sort.Strings(all)
	got := map[string][]string{}
	for _, r := range rule.Spec.Rules {
		if len(r.MatchFeatures) != 1 || r.MatchFeatures[0].Feature != "pci.device" {
			t.Fatalf("rule %q: want one pci.device term, got %+v", r.Name, r.MatchFeatures)
		}
		me := *r.MatchFeatures[0].MatchExpressions
		if diff := cmp.Diff([]string{"10de"}, []string(me["vendor"].Value)); diff != "" {
			t.Errorf("rule %q vendor (-want +got):\n%s", r.Name, diff)
		}
		if diff := cmp.Diff([]string{"0302", "0300"}, []string(me["class"].Value)); diff != "" {
			t.Errorf("rule %q class (-want +got):\n%s", r.Name, diff)
		}
		ids := append([]string(nil), me["device"].Value...)
		if r.Labels[slicerv1alpha1.LabelMIGCapable] == "true" {
			sort.Strings(ids)
			if diff := cmp.Diff(all, ids); diff != "" {
				t.Errorf("mig-capable device ids (-internal/mig +rule):\n%s", diff)
			}
			continue
		}
		got[r.Labels[slicerv1alpha1.LabelGPUModel]] = ids
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("per-model device ids (-internal/mig +rule):\n%s", diff)
	}
}

func TestNodeFeatureRuleExtraExpressions(t *testing.T) {
	o := testOptions(func(s *slicerv1alpha1.Slicer) {
		s.Spec.NodeSelection.ExtraMatchExpressions = []slicerv1alpha1.NodeFeatureExpression{
			{Feature: "kernel.loadedmodule", Key: "vfio_pci", Operator: "DoesNotExist"},
			{Feature: "system.osrelease", Key: "ID", Operator: "In", Values: []string{"rhel", "rhcos"}},
			{Feature: "kernel.loadedmodule", Key: "i2c_core", Operator: "Exists"},
		}
	})
	rule, err := NodeFeatureRule(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rule.Spec.Rules {
		if len(r.MatchFeatures) != 3 {
			t.Fatalf("rule %q has %d terms, want pci.device + 2 extra", r.Name, len(r.MatchFeatures))
		}
		km := *r.MatchFeatures[1].MatchExpressions
		if r.MatchFeatures[1].Feature != "kernel.loadedmodule" || km["vfio_pci"].Op != "DoesNotExist" || km["i2c_core"].Op != "Exists" {
			t.Errorf("rule %q kernel term = %+v", r.Name, km)
		}
		os := *r.MatchFeatures[2].MatchExpressions
		if diff := cmp.Diff([]string{"rhel", "rhcos"}, []string(os["ID"].Value)); diff != "" {
			t.Errorf("rule %q osrelease values:\n%s", r.Name, diff)
		}
	}
	// The base rule is untouched by rendering.
	base, err := BaseNodeFeatureRule()
	if err != nil {
		t.Fatal(err)
	}
	if len(base.Spec.Rules[0].MatchFeatures) != 1 {
		t.Error("embedded rule mutated")
	}
}

func findModule(t *testing.T, objs []client.Object) *kmmv1beta1.Module {
	t.Helper()
	for _, o := range objs {
		if m, ok := o.(*kmmv1beta1.Module); ok {
			return m
		}
	}
	t.Fatal("no Module rendered")
	return nil
}

func TestDriver(t *testing.T) {
	for _, mode := range []slicerv1alpha1.DriverMode{slicerv1alpha1.DriverModePreinstalled, slicerv1alpha1.DriverModeEmulated} {
		objs, err := Driver(testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Driver.Mode = mode }))
		if err != nil || len(objs) != 0 {
			t.Errorf("mode %s rendered %d objects (err %v), want none", mode, len(objs), err)
		}
	}
	objs, err := Driver(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	m := findModule(t, objs)
	// KMM's load and unload pods are privileged and run in the Module's
	// namespace: every driver object is in the agent's (privileged) one.
	for _, obj := range objs {
		if ns, ok := obj.(*corev1.Namespace); ok {
			if ns.Name != "slicer-agent" {
				t.Errorf("Driver renders Namespace %s, want only the agent's", ns.Name)
			}
			continue
		}
		if obj.GetNamespace() != "slicer-agent" {
			t.Errorf("%T %s is in namespace %q, want the agent's", obj, obj.GetName(), obj.GetNamespace())
		}
	}
	for _, obj := range LegacyDriver(testOptions()) {
		if obj.GetNamespace() != "slicer-system" {
			t.Errorf("legacy %T %s in %q, want the operator's namespace", obj, obj.GetName(), obj.GetNamespace())
		}
	}
	openshift := testOptions()
	openshift.Platform.OpenShift = true
	ocObjs, err := Driver(openshift)
	if err != nil {
		t.Fatal(err)
	}
	var scc bool
	for _, obj := range ocObjs {
		if r, ok := obj.(*rbacv1.Role); ok {
			scc = r.Namespace == "slicer-agent" && cmp.Equal(r.Rules, SCCRules)
		}
	}
	if !scc {
		t.Error("on OpenShift the driver's ServiceAccount has no privileged SCC Role in the agent namespace")
	}
	if diff := cmp.Diff(map[string]string{slicerv1alpha1.LabelMIGCapable: "true"}, m.Spec.Selector); diff != "" {
		t.Errorf("selector:\n%s", diff)
	}
	c := m.Spec.ModuleLoader.Container
	if diff := cmp.Diff([]string{"nouveau"}, c.InTreeModulesToRemove); diff != "" {
		t.Errorf("inTreeModulesToRemove:\n%s", diff)
	}
	if c.Modprobe.ModuleName != "nvidia" || c.Modprobe.FirmwarePath != "/firmware" {
		t.Errorf("modprobe = %+v", c.Modprobe)
	}
	want := []kmmv1beta1.KernelMapping{{Regexp: `^.+$`, ContainerImage: "reg/driver:${KERNEL_FULL_VERSION}"}}
	if diff := cmp.Diff(want, c.KernelMappings); diff != "" {
		t.Errorf("kernel mappings:\n%s", diff)
	}
	if c.Build != nil || c.Sign != nil {
		t.Error("build or sign without asking")
	}

	objs, err = Driver(testOptions(func(s *slicerv1alpha1.Slicer) {
		s.Spec.Driver.Image = "mine/driver:${KERNEL_FULL_VERSION}"
		s.Spec.Driver.KernelMappings = []slicerv1alpha1.KernelMapping{{Regexp: `^5\.14\..*el9.*$`, ContainerImage: "el9/driver:${KERNEL_FULL_VERSION}"}, {Regexp: `^6\..*$`}}
		s.Spec.Driver.Build = &slicerv1alpha1.DriverBuildSpec{State: slicerv1alpha1.FeatureEnabled, DriverVersion: "570.172.08"}
		s.Spec.Driver.Sign = &slicerv1alpha1.DriverSignSpec{KeySecret: "key", CertSecret: "cert"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	m = findModule(t, objs)
	c = m.Spec.ModuleLoader.Container
	want = []kmmv1beta1.KernelMapping{
		{Regexp: `^5\.14\..*el9.*$`, ContainerImage: "el9/driver:${KERNEL_FULL_VERSION}"},
		{Regexp: `^6\..*$`, ContainerImage: "mine/driver:${KERNEL_FULL_VERSION}"},
		{Regexp: `^.+$`, ContainerImage: "mine/driver:${KERNEL_FULL_VERSION}"},
	}
	if diff := cmp.Diff(want, c.KernelMappings); diff != "" {
		t.Errorf("kernel mappings:\n%s", diff)
	}
	if c.Build == nil || c.Build.DockerfileConfigMap.Name != DriverBuildConfigMap || c.Build.BuildArgs[0].Value != "570.172.08" {
		t.Fatalf("build = %+v", c.Build)
	}
	if c.Sign == nil || c.Sign.KeySecret.Name != "key" || c.Sign.CertSecret.Name != "cert" || len(c.Sign.FilesToSign) == 0 {
		t.Fatalf("sign = %+v", c.Sign)
	}
	// The build ConfigMap carries driver-container/Containerfile verbatim.
	var cm *corev1.ConfigMap
	for _, o := range objs {
		if x, ok := o.(*corev1.ConfigMap); ok {
			cm = x
		}
	}
	if cm == nil || cm.Data[drivercontainer.ConfigMapKey] != string(drivercontainer.Containerfile) {
		t.Fatal("build ConfigMap missing or not the Containerfile")
	}
	// Files signed are files the Containerfile installs.
	for _, f := range c.Sign.FilesToSign {
		dir := f[:strings.LastIndex(f, "/")]
		if !strings.Contains(string(drivercontainer.Containerfile), strings.TrimPrefix(dir, "/opt")) {
			t.Errorf("signed file %s is not under a directory the Containerfile fills", f)
		}
	}
}
