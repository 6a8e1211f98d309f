package serving

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// oneSecret is a client.Reader that holds at most one Secret (nil: not found).
type oneSecret struct {
	mu     sync.Mutex
	secret *corev1.Secret
}

func (r *oneSecret) set(s *corev1.Secret) { r.mu.Lock(); r.secret = s; r.mu.Unlock() }

func (r *oneSecret) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.secret == nil || r.secret.Namespace != key.Namespace || r.secret.Name != key.Name {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
	}
	r.secret.DeepCopyInto(obj.(*corev1.Secret))
	return nil
}

func (r *oneSecret) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not used")
}

// certSecret is a kubernetes.io/tls Secret ns/name with a certificate for host, and its CA.
func certSecret(t *testing.T, ns, name, host string) (*corev1.Secret, []byte) {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{Host: host, MaxAge: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	leaf, ca := pem.Decode(certPEM)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: pem.EncodeToMemory(leaf), corev1.TLSPrivateKeyKey: keyPEM},
	}, ca
}

// The agent's metrics server serves the certificate of a Secret it reads through the API:
// nothing before the first read (the handshake fails, saying why), then the Secret's; a
// renewed Secret is served once read again, and a broken one leaves the last good one served.
func TestMetricsServeSecretCertificate(t *testing.T) {
	const host = "slicer-agent-metrics.slicer-agent.svc"
	f := Flags{MetricsAddr: freeAddr(t), SecureMetrics: true, MetricsCertSecret: "slicer-system/slicer-agent-metrics-cert"}
	certs, err := f.SecretCertificate()
	if err != nil || certs == nil || certs.Key != (types.NamespacedName{Namespace: "slicer-system", Name: "slicer-agent-metrics-cert"}) {
		t.Fatalf("SecretCertificate() = %+v, %v", certs, err)
	}
	reader := &oneSecret{}
	certs.Reader = reader
	o := metricsOptions(t, f)
	o.TLSOpts = append(o.TLSOpts, certs.ServeWith)
	serveMetrics(t, o)
	dial := dialer(f.MetricsAddr, host)
	ctx := t.Context()

	first, firstCA := certSecret(t, "slicer-system", "slicer-agent-metrics-cert", host)
	if err := certs.Load(ctx); !apierrors.IsNotFound(errors.Unwrap(err)) {
		t.Fatalf("Load before the Secret exists: %v, want not found", err)
	}
	if _, err := certs.GetCertificate(&tls.ClientHelloInfo{ServerName: host}); err == nil || !strings.Contains(err.Error(), "slicer-system/slicer-agent-metrics-cert") {
		t.Errorf("GetCertificate before the first read: %v, want an error naming the Secret", err)
	}
	if err := dial(firstCA); err == nil {
		t.Error("TLS before the first read succeeded")
	}

	reader.set(first)
	if err := certs.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dial(firstCA); err != nil {
		t.Fatalf("TLS with the Secret's CA: %v", err)
	}

	renewed, renewedCA := certSecret(t, "slicer-system", "slicer-agent-metrics-cert", host)
	reader.set(renewed)
	if err := certs.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dial(renewedCA); err != nil {
		t.Fatalf("TLS with the renewed Secret's CA: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	if err := dial(firstCA); !errors.As(err, &unknown) {
		t.Errorf("TLS with the first CA after the renewal: %v, want an unknown authority error", err)
	}

	broken := renewed.DeepCopy()
	broken.Data[corev1.TLSPrivateKeyKey] = []byte("not a key")
	reader.set(broken)
	if err := certs.Load(ctx); err == nil {
		t.Error("Load of a Secret without a valid key pair succeeded")
	}
	if err := dial(renewedCA); err != nil {
		t.Errorf("TLS after a failed read: %v, want the last good certificate served", err)
	}
}

func TestSecretCertificateFlag(t *testing.T) {
	if c, err := (Flags{}).SecretCertificate(); c != nil || err != nil {
		t.Errorf("without the flag: %v, %v, want nothing", c, err)
	}
	for _, bad := range []string{"name-only", "/name", "ns/", "ns/a/b"} {
		if _, err := (Flags{MetricsCertSecret: bad}).SecretCertificate(); err == nil || !strings.Contains(err.Error(), "--"+FlagMetricsCertSecret) {
			t.Errorf("--%s=%s: %v, want an error naming the flag", FlagMetricsCertSecret, bad, err)
		}
	}
}
