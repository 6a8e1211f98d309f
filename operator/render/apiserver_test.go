package render

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Host-network components dial the apiserver endpoint the operator was given
// (the kubernetes Service is not routed from the node on the local loopback
// cluster); in pod-network mode, or without an endpoint, nothing is overridden.
func TestAPIServerEnvOfHostNetworkComponents(t *testing.T) {
	hostNet := func(s *slicerv1alpha1.Slicer) { s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork }
	emulated := func(s *slicerv1alpha1.Slicer) {
		s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated
		s.Spec.Driver.InTreeModulesToRemove = nil
		s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 2}}
	}
	endpoint := APIServerEndpoint{Host: "127.0.0.1", Port: "16443"}
	cases := []struct {
		name     string
		opts     Options
		wantHost string
		wantPort string
	}{
		{name: "pod network ignores the endpoint", opts: withAPIServer(testOptions(emulated), endpoint)},
		{name: "host network without an endpoint", opts: testOptions(emulated, hostNet)},
		{name: "host network with an endpoint", opts: withAPIServer(testOptions(emulated, hostNet), endpoint), wantHost: "127.0.0.1", wantPort: "16443"},
	}
	renderers := []struct {
		name string
		kind string
		fn   func(Options) ([]client.Object, error)
	}{
		{"scheduler", "Deployment", Scheduler},
		{"webhook", "Deployment", Webhook},
		{"agent", "DaemonSet", Agent},
	}
	for _, tc := range cases {
		for _, r := range renderers {
			objs, err := r.fn(tc.opts)
			if err != nil {
				t.Fatalf("%s/%s: %v", tc.name, r.name, err)
			}
			tmpl := podTemplate(t, objs, r.kind)
			got := map[string]string{}
			for _, c := range tmpl.Spec.Containers {
				for _, e := range c.Env {
					if e.Name == "KUBERNETES_SERVICE_HOST" || e.Name == "KUBERNETES_SERVICE_PORT" {
						got[c.Name+"/"+e.Name] = e.Value
					}
				}
			}
			want := map[string]string{}
			if tc.wantHost != "" {
				c := tmpl.Spec.Containers[0].Name
				want[c+"/KUBERNETES_SERVICE_HOST"] = tc.wantHost
				want[c+"/KUBERNETES_SERVICE_PORT"] = tc.wantPort
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s/%s: apiserver env (-want +got):\n%s", tc.name, r.name, diff)
			}
		}
	}
}

func withAPIServer(o Options, e APIServerEndpoint) Options {
	o.APIServer = e
	return o
}
