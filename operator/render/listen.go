package render

import (
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/slicer-operator/slicer/internal/serving"
)

// Where the components listen. On the pod network each pod has its own
// network namespace and listens on all of it (":port"), as every pod does.
// On the host network the pods share the node's: nothing listens on every
// interface. Health probes listen on loopback (the kubelet probing them runs
// on the same node); what Prometheus scrapes (the webhook's and agent's
// metrics, the scheduler's secure port) listens on spec.network.listenAddress,
// by default the pod's node address. The webhook itself serves on
// HostNetworkAddress, the address the apiserver dials (WebhookURL).
const (
	// hostIPEnv holds the pod's status.hostIP in host-network containers.
	hostIPEnv = "HOST_IP"
	loopback  = "127.0.0.1"
)

// scrapeHost is the host part of the listeners Prometheus scrapes: "" on
// the pod network, else the CR's listenAddress or $(HOST_IP), which the
// kubelet expands from the container's environment (hostIPEnvVars).
func scrapeHost(o Options) string {
	if !o.hostNetwork() {
		return ""
	}
	if a := o.Slicer.Spec.Network.ListenAddress; a != "" {
		return a
	}
	return "$(" + hostIPEnv + ")"
}

// healthHost is the host part of the health probe listeners.
func healthHost(o Options) string {
	if !o.hostNetwork() {
		return ""
	}
	return loopback
}

// hostIPEnvVars are the environment a host-network container needs to
// expand $(HOST_IP); nil when nothing refers to it.
func hostIPEnvVars(o Options) []corev1.EnvVar {
	if !o.hostNetwork() || o.Slicer.Spec.Network.ListenAddress != "" {
		return nil
	}
	return []corev1.EnvVar{{Name: hostIPEnv, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.hostIP"},
	}}}
}

// listenAddr joins host and port as a listen address: ":port" for every
// interface, brackets around an IPv6 literal and around $(HOST_IP) (either
// family; Go's listeners accept "[192.0.2.1]:port" too).
func listenAddr(host string, port int32) string {
	p := strconv.Itoa(int(port))
	if host == "" {
		return ":" + p
	}
	if net.ParseIP(host) == nil {
		return "[" + host + "]:" + p
	}
	return net.JoinHostPort(host, p)
}

// listenArgs are the metrics and health flags of a controller-runtime
// component (internal/serving): metrics over HTTPS with authentication
// and authorization, health probes over HTTP.
func listenArgs(o Options, metricsPort, healthPort int32) []string {
	return []string{
		"--" + serving.FlagMetricsBindAddress + "=" + listenAddr(scrapeHost(o), metricsPort),
		"--" + serving.FlagMetricsSecure + "=true",
		"--" + serving.FlagHealthBindAddress + "=" + listenAddr(healthHost(o), healthPort),
	}
}

// httpProbe is an HTTP GET probe of path on the named port at host ("":
// the pod IP).
func httpProbe(path, port, host string, scheme corev1.URIScheme) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: path, Port: intstr.FromString(port), Host: host, Scheme: scheme,
	}}}
}

// schedulerProbeHost is where the kubelet reaches the scheduler's secure
// port: the pod IP (the node address on the host network) unless the CR
// names another listen address.
func schedulerProbeHost(o Options) string {
	if !o.hostNetwork() {
		return ""
	}
	return o.Slicer.Spec.Network.ListenAddress
}
