package render

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// listeners is what a rendered component's pod says about where it listens.
type listeners struct {
	Args       map[string]string // listen flags by name
	Probes     []string          // path@host of each probe (host "" is the pod IP)
	HostIPFrom string            // fieldPath of $HOST_IP, if set
}

func listenersOf(t *testing.T, objs []client.Object, kind string) listeners {
	t.Helper()
	c := podTemplate(t, objs, kind).Spec.Containers[0]
	l := listeners{Args: map[string]string{}}
	for _, a := range c.Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch name {
		case "metrics-bind-address", "metrics-secure", "health-probe-bind-address", "bind-address", "secure-port":
			l.Args[name] = value
		}
	}
	for _, p := range []string{"live", "ready"} {
		probe := c.LivenessProbe
		if p == "ready" {
			probe = c.ReadinessProbe
		}
		l.Probes = append(l.Probes, probe.HTTPGet.Path+"@"+probe.HTTPGet.Host)
	}
	for _, e := range c.Env {
		if e.Name == hostIPEnv && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			l.HostIPFrom = e.ValueFrom.FieldRef.FieldPath
		}
	}
	return l
}

// On the pod network each component listens on its pod's interfaces; on
// the host network nothing listens on every interface of the node: health
// probes on loopback, what Prometheus scrapes on spec.network.listenAddress
// or the node address, the webhook on the address the apiserver dials.
// Metrics are always HTTPS with authentication and authorization.
func TestListenAddresses(t *testing.T) {
	hostNet := func(addr string) func(*slicerv1alpha1.Slicer) {
		return func(s *slicerv1alpha1.Slicer) {
			s.Spec.Network.EndpointMode = slicerv1alpha1.EndpointModeHostNetwork
			s.Spec.Network.ListenAddress = addr
		}
	}
	type want struct{ scheduler, webhook, agent listeners }
	cases := []struct {
		name string
		opts Options
		want want
	}{{
		name: "pod network",
		opts: testOptions(),
		want: want{
			scheduler: listeners{Args: map[string]string{"secure-port": "10269"}, Probes: []string{"/livez@", "/readyz@"}},
			webhook: listeners{Args: map[string]string{"metrics-bind-address": ":9444", "metrics-secure": "true", "health-probe-bind-address": ":9445"},
				Probes: []string{"/healthz@", "/readyz@"}},
			agent: listeners{Args: map[string]string{"metrics-bind-address": ":9446", "metrics-secure": "true", "health-probe-bind-address": ":9447"},
				Probes: []string{"/healthz@", "/readyz@"}},
		},
	}, {
		name: "host network, node address",
		opts: withHostAddress(testOptions(hostNet("")), "10.0.0.1"),
		want: want{
			scheduler: listeners{Args: map[string]string{"secure-port": "10269", "bind-address": "$(HOST_IP)"},
				Probes: []string{"/livez@", "/readyz@"}, HostIPFrom: "status.hostIP"},
			webhook: listeners{Args: map[string]string{"bind-address": "10.0.0.1", "metrics-bind-address": "[$(HOST_IP)]:9444", "metrics-secure": "true", "health-probe-bind-address": "127.0.0.1:9445"},
				Probes: []string{"/healthz@127.0.0.1", "/readyz@127.0.0.1"}, HostIPFrom: "status.hostIP"},
			agent: listeners{Args: map[string]string{"metrics-bind-address": "[$(HOST_IP)]:9446", "metrics-secure": "true", "health-probe-bind-address": "127.0.0.1:9447"},
				Probes: []string{"/healthz@127.0.0.1", "/readyz@127.0.0.1"}, HostIPFrom: "status.hostIP"},
		},
	}, {
		name: "host network, loopback",
		opts: withHostAddress(testOptions(hostNet("127.0.0.1")), "127.0.0.1"),
		want: want{
			scheduler: listeners{Args: map[string]string{"secure-port": "10269", "bind-address": "127.0.0.1"},
				Probes: []string{"/livez@127.0.0.1", "/readyz@127.0.0.1"}},
			webhook: listeners{Args: map[string]string{"bind-address": "127.0.0.1", "metrics-bind-address": "127.0.0.1:9444", "metrics-secure": "true", "health-probe-bind-address": "127.0.0.1:9445"},
				Probes: []string{"/healthz@127.0.0.1", "/readyz@127.0.0.1"}},
			agent: listeners{Args: map[string]string{"metrics-bind-address": "127.0.0.1:9446", "metrics-secure": "true", "health-probe-bind-address": "127.0.0.1:9447"},
				Probes: []string{"/healthz@127.0.0.1", "/readyz@127.0.0.1"}},
		},
	}, {
		name: "host network, IPv6 address",
		opts: withHostAddress(testOptions(hostNet("fd00::10")), "fd00::10"),
		want: want{
			scheduler: listeners{Args: map[string]string{"secure-port": "10269", "bind-address": "fd00::10"},
				Probes: []string{"/livez@fd00::10", "/readyz@fd00::10"}},
			webhook: listeners{Args: map[string]string{"bind-address": "fd00::10", "metrics-bind-address": "[fd00::10]:9444", "metrics-secure": "true", "health-probe-bind-address": "127.0.0.1:9445"},
				Probes: []string{"/healthz@127.0.0.1", "/readyz@127.0.0.1"}},
			agent: listeners{Args: map[string]string{"metrics-bind-address": "[fd00::10]:9446", "metrics-secure": "true", "health-probe-bind-address": "127.0.0.1:9447"},
				Probes: []string{"/healthz@127.0.0.1", "/readyz@127.0.0.1"}},
		},
	}}
	for _, tc := range cases {
		for _, r := range []struct {
			name string
			kind string
			fn   func(Options) ([]client.Object, error)
			want listeners
		}{
			{"scheduler", "Deployment", Scheduler, tc.want.scheduler},
			{"webhook", "Deployment", Webhook, tc.want.webhook},
			{"agent", "DaemonSet", Agent, tc.want.agent},
		} {
			objs, err := r.fn(tc.opts)
			if err != nil {
				t.Fatalf("%s/%s: %v", tc.name, r.name, err)
			}
			if diff := cmp.Diff(r.want, listenersOf(t, objs, r.kind)); diff != "" {
				t.Errorf("%s/%s: listeners (-want +got):\n%s", tc.name, r.name, diff)
			}
		}
	}
}

func withHostAddress(o Options, addr string) Options {
	o.HostNetworkAddress = addr
	return o
}

func TestListenAddr(t *testing.T) {
	for _, tc := range []struct {
		host string
		port int32
		want string
	}{
		{"", 9, ":9"},
		{"127.0.0.1", 9, "127.0.0.1:9"},
		{"fd00::1", 9, "[fd00::1]:9"},
		{"$(HOST_IP)", 9, "[$(HOST_IP)]:9"},
	} {
		if got := listenAddr(tc.host, tc.port); got != tc.want {
			t.Errorf("listenAddr(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.want)
		}
	}
}
