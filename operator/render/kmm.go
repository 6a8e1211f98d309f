package render

import (
	"fmt"

	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	drivercontainer "github.com/slicer-operator/slicer/driver-container"
	kmmtemplate "github.com/slicer-operator/slicer/kmm"
)

// KernelVersionVar is substituted by KMM with the node's full kernel version.
const KernelVersionVar = "${KERNEL_FULL_VERSION}"

// BaseModule parses kmm/module.yaml.
func BaseModule() (*kmmv1beta1.Module, error) {
	m := &kmmv1beta1.Module{}
	if err := yaml.UnmarshalStrict(kmmtemplate.Module, m); err != nil {
		return nil, fmt.Errorf("parse kmm/module.yaml: %w", err)
	}
	return m, nil
}

// Driver renders the objects of driver mode KMM: the Module, its
// ServiceAccount (on OpenShift with its SCC Role) and, for in-cluster builds,
// the ConfigMap holding driver-container/Containerfile. Other modes render
// nothing. They live in the agent's namespace, rendered here too since the
// driver is applied before the agent: KMM runs its privileged load/unload
// pods in the Module's namespace, and only the agent's is labelled for the
// privileged Pod Security level (the operator's is restricted, which would
// refuse them).
func Driver(o Options) ([]client.Object, error) {
	if o.driverMode() != slicerv1alpha1.DriverModeKMM {
		return nil, nil
	}
	m, err := Module(o)
	if err != nil {
		return nil, err
	}
	ns := o.AgentNamespace
	objs := []client.Object{AgentNamespace(o), serviceAccount(ns, DriverName, "driver")}
	if o.Platform.OpenShift {
		objs = append(objs,
			role(ns, DriverName, "driver", SCCRules),
			roleBinding(ns, DriverName, "driver", ns))
	}
	if build := o.Slicer.Spec.Driver.Build; build != nil && build.State == slicerv1alpha1.FeatureEnabled {
		objs = append(objs, &corev1.ConfigMap{
			TypeMeta:   typeMeta(corev1.SchemeGroupVersion.WithKind("ConfigMap")),
			ObjectMeta: metav1.ObjectMeta{Name: DriverBuildConfigMap, Namespace: ns, Labels: labels("driver")},
			Data:       map[string]string{drivercontainer.ConfigMapKey: string(drivercontainer.Containerfile)},
		})
	}
	return append(objs, m), nil
}

// Module renders the KMM Module from kmm/module.yaml and spec.driver.
func Module(o Options) (*kmmv1beta1.Module, error) {
	m, err := BaseModule()
	if err != nil {
		return nil, err
	}
	d := o.Slicer.Spec.Driver
	m.TypeMeta = typeMeta(kmmv1beta1.GroupVersion.WithKind("Module"))
	m.Name, m.Namespace, m.Labels = ModuleName, o.AgentNamespace, labels("driver")
	m.Spec.Selector = map[string]string{slicerv1alpha1.LabelMIGCapable: "true"}
	m.Spec.ModuleLoader.ServiceAccountName = DriverName
	c := &m.Spec.ModuleLoader.Container
	image := d.Image
	if image == "" {
		image = o.Images.Driver + ":" + KernelVersionVar
	}
	if len(d.InTreeModulesToRemove) > 0 {
		c.InTreeModulesToRemove = append([]string(nil), d.InTreeModulesToRemove...)
	}
	var build *kmmv1beta1.Build
	if d.Build != nil && d.Build.State == slicerv1alpha1.FeatureEnabled {
		build = &kmmv1beta1.Build{
			DockerfileConfigMap: &corev1.LocalObjectReference{Name: DriverBuildConfigMap},
		}
		if d.Build.DriverVersion != "" {
			build.BuildArgs = []kmmv1beta1.BuildArg{{Name: "DRIVER_VERSION", Value: d.Build.DriverVersion}}
		}
	}
	var sign *kmmv1beta1.Sign
	if d.Sign != nil {
		sign = &kmmv1beta1.Sign{
			KeySecret:   &corev1.LocalObjectReference{Name: d.Sign.KeySecret},
			CertSecret:  &corev1.LocalObjectReference{Name: d.Sign.CertSecret},
			FilesToSign: signedFiles(),
		}
	}
	mappings := []kmmv1beta1.KernelMapping{}
	for _, km := range d.KernelMappings {
		img := km.ContainerImage
		if img == "" {
			img = image
		}
		mappings = append(mappings, kmmv1beta1.KernelMapping{Regexp: km.Regexp, ContainerImage: img})
	}
	// The catch-all mapping comes last: KMM uses the first that matches.
	mappings = append(mappings, kmmv1beta1.KernelMapping{Regexp: `^.+$`, ContainerImage: image})
	c.KernelMappings = mappings
	c.Build, c.Sign = build, sign
	if OrderedUpgrade(o) {
		c.Version = ModuleVersion(*c)
	}
	return m, nil
}

// LegacyDriver are the driver objects where releases up to 0.1.0 rendered
// them, in the operator's namespace; the reconciler deletes them (an
// upgrade would otherwise leave a Module whose pods Pod Security refuses).
func LegacyDriver(o Options) []client.Object {
	meta := metav1.ObjectMeta{Name: ModuleName, Namespace: o.Namespace}
	return []client.Object{
		&kmmv1beta1.Module{TypeMeta: typeMeta(kmmv1beta1.GroupVersion.WithKind("Module")), ObjectMeta: meta},
		&corev1.ServiceAccount{TypeMeta: typeMeta(corev1.SchemeGroupVersion.WithKind("ServiceAccount")), ObjectMeta: metav1.ObjectMeta{Name: DriverName, Namespace: o.Namespace}},
		&corev1.ConfigMap{TypeMeta: typeMeta(corev1.SchemeGroupVersion.WithKind("ConfigMap")), ObjectMeta: metav1.ObjectMeta{Name: DriverBuildConfigMap, Namespace: o.Namespace}},
	}
}

// signedFiles are the modules the driver container ships.
func signedFiles() []string {
	mods := []string{"nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm", "nvidia-peermem"}
	files := make([]string, 0, len(mods))
	for _, n := range mods {
		files = append(files, "/opt/lib/modules/"+KernelVersionVar+"/kernel/drivers/video/"+n+".ko")
	}
	return files
}
