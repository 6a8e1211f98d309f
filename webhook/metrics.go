package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of an admission request, the values of the result label.
const (
	ResultMutated  = "mutated"
	ResultSkipped  = "skipped"
	ResultRejected = "rejected"
)

// Metrics are the webhook's own metrics (controller-runtime adds its
// controller_runtime_webhook_* metrics to its own registry).
type Metrics struct {
	mutations  *prometheus.CounterVec
	certExpiry prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		mutations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_webhook_mutations_total",
			Help: "Pod admission requests answered by the Slicer webhook, by result: mutated (a non-empty patch), skipped (nothing to change) or rejected (denied, or a malformed request).",
		}, []string{"result"}),
		certExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slicer_webhook_certificate_expiration_timestamp_seconds",
			Help: "Expiry (Unix seconds) of the serving certificate the Slicer webhook currently serves; updated whenever the certificate is reloaded from disk.",
		}),
	}
	for _, r := range []string{ResultMutated, ResultSkipped, ResultRejected} {
		m.mutations.WithLabelValues(r)
	}
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register webhook metrics: %w", err)
		}
	}
	return m, nil
}

// Collectors returns every collector of the webhook's metrics.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.mutations, m.certExpiry}
}

func (m *Metrics) observe(result string) {
	if m != nil {
		m.mutations.WithLabelValues(result).Inc()
	}
}

// ObserveCertificate records the expiry of the certificate now served. It is
// meant as a certwatcher callback; a certificate that cannot be parsed leaves
// the gauge as it was and returns the error.
func (m *Metrics) ObserveCertificate(cert tls.Certificate) error {
	leaf := cert.Leaf
	if leaf == nil {
		if len(cert.Certificate) == 0 {
			return fmt.Errorf("serving certificate has no certificate data")
		}
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("parse serving certificate: %w", err)
		}
	}
	m.certExpiry.Set(float64(leaf.NotAfter.Unix()))
	return nil
}
