package render

import (
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// agentPod is the pod the agent DaemonSet rendered for o would create.
func agentPod(t *testing.T, o Options) *corev1.Pod {
	t.Helper()
	objs, err := Agent(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			return &corev1.Pod{ObjectMeta: ds.Spec.Template.ObjectMeta, Spec: ds.Spec.Template.Spec}
		}
	}
	t.Fatal("no agent DaemonSet")
	return nil
}

// The operator tells the agent pods that publish the DRA driver's ResourceSlices from the
// others by the pods themselves: the rendered DRA agent is one, the device-plugin agent is
// not, and both carry the labels the operator lists them by.
func TestRunsDRAPlugin(t *testing.T) {
	dra := agentPod(t, testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Frontend = slicerv1alpha1.FrontendDRA }))
	dp := agentPod(t, testOptions())
	if !RunsDRAPlugin(dra) {
		t.Errorf("the DRA agent's pod does not run the DRA plugin: args %v", dra.Spec.Containers[0].Args)
	}
	if RunsDRAPlugin(dp) {
		t.Errorf("the device-plugin agent's pod runs the DRA plugin: args %v", dp.Spec.Containers[0].Args)
	}
	for _, p := range []*corev1.Pod{dra, dp} {
		for k, v := range AgentPodLabels() {
			if p.Labels[k] != v {
				t.Errorf("agent pod labels %v lack %s=%s", p.Labels, k, v)
			}
		}
	}
}

// spec.agent.kubeletRootDir moves every kubelet directory the agent mounts, each mounted at
// its host path, and the DRA plugin's socket and registration directories with them, so
// the socket path it registers is one the kubelet can dial; nothing is left under the
// default root.
func TestAgentKubeletRootDir(t *testing.T) {
	const root = "/data/kubelet"
	pod := agentPod(t, testOptions(func(s *slicerv1alpha1.Slicer) {
		s.Spec.Frontend = slicerv1alpha1.FrontendDRA
		s.Spec.Agent.KubeletRootDir = root
	}))
	c := pod.Spec.Containers[0]
	mountOf := map[string]string{}
	for _, m := range c.VolumeMounts {
		mountOf[m.Name] = m.MountPath
	}
	hostPaths := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		hostPaths[v.HostPath.Path] = true
		if mountOf[v.Name] != v.HostPath.Path {
			t.Errorf("volume %s: host path %s mounted at %s", v.Name, v.HostPath.Path, mountOf[v.Name])
		}
		if strings.HasPrefix(v.HostPath.Path, DefaultKubeletRootDir) {
			t.Errorf("volume %s still under the default root: %s", v.Name, v.HostPath.Path)
		}
	}
	for _, dir := range []string{"device-plugins", "pod-resources", "plugins", "plugins_registry"} {
		if !hostPaths[root+"/"+dir] {
			t.Errorf("no hostPath %s/%s in %v", root, dir, hostPaths)
		}
	}
	for _, arg := range []string{
		"--device-plugin-dir=" + root + "/device-plugins",
		"--pod-resources-socket=" + root + "/pod-resources/kubelet.sock",
		"--dra-plugin-dir=" + root + "/plugins/" + migdra.DriverName,
		"--dra-registry-dir=" + root + "/plugins_registry",
	} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	for _, arg := range c.Args {
		if strings.Contains(arg, DefaultKubeletRootDir) {
			t.Errorf("arg %s still names the default root", arg)
		}
	}
}

// The default root gives the directories the kubelet and the libraries use by default.
func TestDefaultKubeletDirs(t *testing.T) {
	d := KubeletDirsOf(DefaultKubeletRootDir)
	for _, tc := range []struct{ name, got, want string }{
		{"device plugins", d.DevicePlugins, path.Clean(pluginapi.DevicePluginPath)},
		{"DRA plugins", d.Plugins, kubeletplugin.KubeletPluginsDir},
		{"DRA registry", d.PluginsRegistry, kubeletplugin.KubeletRegistryDir},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, tc.got, tc.want)
		}
	}
	// an empty field (an object stored before the field existed) is the default root
	pod := agentPod(t, testOptions())
	if !slices.Contains(pod.Spec.Containers[0].Args, "--device-plugin-dir="+d.DevicePlugins) {
		t.Errorf("args %v", pod.Spec.Containers[0].Args)
	}
}
