package webhook

import (
	"crypto/tls"
	"fmt"
	"path/filepath"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// ServerOptions configure the HTTPS server that serves the handlers.
type ServerOptions struct {
	// Host and Port to listen on (Host "" listens on every interface).
	Host string
	Port int
	// CertDir holds CertName and KeyName (default tls.crt and tls.key), which are
	// reloaded whenever they change on disk.
	CertDir, CertName, KeyName string
	// Settings of the translating handler.
	Settings Settings
}

// NewServer returns a webhook server serving Register's handlers with the
// certificate in o.CertDir, and the watcher that reloads it. Add the watcher to
// the manager (it is a Runnable) and give the server to the manager as its
// WebhookServer. Every reload updates m's certificate expiry gauge.
func NewServer(o ServerOptions, m *Metrics, log logr.Logger) (ctrlwebhook.Server, *certwatcher.CertWatcher, error) {
	if o.CertName == "" {
		o.CertName = "tls.crt"
	}
	if o.KeyName == "" {
		o.KeyName = "tls.key"
	}
	certPath, keyPath := filepath.Join(o.CertDir, o.CertName), filepath.Join(o.CertDir, o.KeyName)
	watcher, err := certwatcher.New(certPath, keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("load serving certificate %s: %w", certPath, err)
	}
	watcher.RegisterCallback(func(cert tls.Certificate) {
		if err := m.ObserveCertificate(cert); err != nil {
			log.Error(err, "serving certificate reloaded but its expiry is unknown", "cert", certPath)
			return
		}
		log.Info("serving certificate loaded", "cert", certPath)
	})
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host: o.Host,
		Port: o.Port,
		// controller-runtime offers h2 by default; HTTP/1.1 only, as on every Slicer listener
		// (internal/serving: CVE-2023-44487, CVE-2023-39325).
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.GetCertificate = watcher.GetCertificate
			c.MinVersion = tls.VersionTLS12
			c.NextProtos = []string{"http/1.1"}
		}},
	})
	Register(srv, o.Settings, m, log)
	return srv, watcher, nil
}
