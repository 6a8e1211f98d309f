// Package serving holds the listener flags every Slicer binary built on
// controller-runtime shares (operator, webhook, agent): where metrics and
// health probes listen, and metrics over HTTPS with Kubernetes
// authentication and authorization. The operator renders the components'
// arguments with the flag names defined here.
package serving

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Flag names, shared by the binaries and operator/render.
const (
	FlagMetricsBindAddress = "metrics-bind-address"
	FlagMetricsSecure      = "metrics-secure"
	FlagHealthBindAddress  = "health-probe-bind-address"
	FlagMetricsCertDir     = "metrics-cert-dir"
	FlagMetricsCertSecret  = "metrics-cert-secret"
)

// Files of a metrics certificate directory (a mounted kubernetes.io/tls Secret).
const (
	MetricsCertFile = "tls.crt"
	MetricsKeyFile  = "tls.key"
)

// Flags are where a binary listens for metrics and health probes.
type Flags struct {
	// MetricsAddr is host:port of /metrics; "0" turns metrics off.
	MetricsAddr string
	// SecureMetrics serves /metrics over HTTPS, answering only callers
	// whose bearer token the apiserver authenticates (TokenReview) and
	// authorizes for GET on the non-resource URL /metrics (SubjectAccessReview).
	SecureMetrics bool
	// MetricsCertDir holds the metrics serving certificate (MetricsCertFile, MetricsKeyFile),
	// reloaded when the files change; empty: a self-signed certificate made in memory at
	// start, which no scraper can verify.
	MetricsCertDir string
	// MetricsCertSecret is "namespace/name" of a kubernetes.io/tls Secret that holds the
	// metrics serving certificate, read through the API (SecretCertificate) by a binary that
	// cannot mount it; it takes the place of MetricsCertDir.
	MetricsCertSecret string
	// ProbeAddr is host:port of /healthz and /readyz (plain HTTP: the
	// kubelet probes them); "0" turns them off.
	ProbeAddr string
}

// Bind registers the flags on fs with the binary's default addresses.
// Metrics are secure unless --metrics-secure=false.
func (f *Flags) Bind(fs *flag.FlagSet, metricsDefault, probeDefault string) {
	fs.StringVar(&f.MetricsAddr, FlagMetricsBindAddress, metricsDefault, `host:port of the metrics endpoint ("0" disables it; ":port" listens on every interface).`)
	fs.BoolVar(&f.SecureMetrics, FlagMetricsSecure, true, "Serve metrics over HTTPS, only to callers the apiserver authenticates and authorizes for GET /metrics.")
	fs.StringVar(&f.MetricsCertDir, FlagMetricsCertDir, "", "Directory with the metrics serving certificate ("+MetricsCertFile+", "+MetricsKeyFile+"), reloaded on change (both must exist at start); empty: a self-signed one made in memory.")
	fs.StringVar(&f.MetricsCertSecret, FlagMetricsCertSecret, "", "namespace/name of a kubernetes.io/tls Secret with the metrics serving certificate, read through the API and re-read every minute; takes the place of --"+FlagMetricsCertDir+".")
	fs.StringVar(&f.ProbeAddr, FlagHealthBindAddress, probeDefault, `host:port of the /healthz and /readyz endpoints (plain HTTP; "0" disables them).`)
}

// MetricsOptions are the controller-runtime metrics server options for f.
// Secure metrics use the certificate of MetricsCertDir (controller-runtime
// watches the files with its certwatcher) or, without one, a self-signed
// certificate made in memory; they refuse HTTP/2 (CVE-2023-44487,
// CVE-2023-39325). A MetricsCertDir that lacks either file is an error:
// controller-runtime would fall back to the self-signed certificate without a
// word, and no scraper could verify it.
func (f Flags) MetricsOptions() (metricsserver.Options, error) {
	o := metricsserver.Options{BindAddress: f.MetricsAddr, SecureServing: f.SecureMetrics}
	if f.SecureMetrics {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		if f.MetricsCertDir != "" {
			for _, name := range []string{MetricsCertFile, MetricsKeyFile} {
				if _, err := os.Stat(filepath.Join(f.MetricsCertDir, name)); err != nil {
					return o, fmt.Errorf("--%s=%s: the metrics serving certificate: %w", FlagMetricsCertDir, f.MetricsCertDir, err)
				}
			}
			o.CertDir, o.CertName, o.KeyName = f.MetricsCertDir, MetricsCertFile, MetricsKeyFile
		}
		o.TLSOpts = []func(*tls.Config){func(c *tls.Config) {
			c.NextProtos = []string{"http/1.1"}
			c.MinVersion = tls.VersionTLS12
		}}
	}
	return o, nil
}
