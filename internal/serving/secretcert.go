package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SecretCertificate serves the certificate of a kubernetes.io/tls Secret that the binary
// reads through the API, for a binary that cannot mount it (the agent: its Secret is in the
// operator's namespace, operator/render/metricstls.go). Handshakes are answered from memory
// (GetCertificate); Start reads the Secret at once, again every Refresh, and every few seconds
// until the first read succeeds. Until then a handshake fails, saying why.
type SecretCertificate struct {
	// Key is the Secret's namespace and name.
	Key types.NamespacedName
	// Reader reads it: an uncached reader (the manager's APIReader), so that the binary
	// needs get on that one Secret only. Set before Start.
	Reader client.Reader
	// Refresh is how often the Secret is read again (default one minute); the operator
	// renews a certificate long before it expires.
	Refresh time.Duration
	// Log names a failed read.
	Log logr.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	lastErr error
}

// SecretCertificate is the certificate source of f.MetricsCertSecret, or nil when it is not
// set. The caller sets its Reader and adds it to the manager.
func (f Flags) SecretCertificate() (*SecretCertificate, error) {
	if f.MetricsCertSecret == "" {
		return nil, nil
	}
	ns, name, ok := strings.Cut(f.MetricsCertSecret, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--%s=%q: want namespace/name", FlagMetricsCertSecret, f.MetricsCertSecret)
	}
	return &SecretCertificate{Key: types.NamespacedName{Namespace: ns, Name: name}}, nil
}

// ServeWith makes a TLS config serve s's certificate (a metrics server's TLSOpts; with
// GetCertificate set, controller-runtime neither watches a directory nor makes its own).
func (s *SecretCertificate) ServeWith(c *tls.Config) { c.GetCertificate = s.GetCertificate }

// GetCertificate answers a handshake with the last certificate read.
func (s *SecretCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert == nil {
		err := s.lastErr
		if err == nil {
			err = errors.New("not read yet")
		}
		return nil, fmt.Errorf("metrics certificate of Secret %s: %w", s.Key, err)
	}
	return s.cert, nil
}

// Load reads the Secret and, when it holds a valid key pair, serves it from then on; on a
// failure the certificate read before stays.
func (s *SecretCertificate) Load(ctx context.Context) error {
	err := s.load(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && s.cert == nil {
		s.lastErr = err
	}
	return err
}

func (s *SecretCertificate) load(ctx context.Context) error {
	var secret corev1.Secret
	if err := s.Reader.Get(ctx, s.Key, &secret); err != nil {
		return fmt.Errorf("read Secret %s: %w", s.Key, err)
	}
	pair, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("key pair of Secret %s (%s, %s): %w", s.Key, corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)
	}
	s.mu.Lock()
	s.cert = &pair
	s.mu.Unlock()
	return nil
}

// Start reads the Secret until ctx ends (a manager Runnable).
func (s *SecretCertificate) Start(ctx context.Context) error {
	refresh := s.Refresh
	if refresh <= 0 {
		refresh = time.Minute
	}
	for {
		wait := refresh
		if err := s.Load(ctx); err != nil {
			s.Log.Error(err, "metrics certificate not read; the last one read, if any, is still served")
			if !s.loaded() {
				wait = 5 * time.Second
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (s *SecretCertificate) loaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert != nil
}

// NeedLeaderElection: every replica serves its own metrics.
func (s *SecretCertificate) NeedLeaderElection() bool { return false }
