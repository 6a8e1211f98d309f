package serving

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func TestBindDefaultsAndOverrides(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Bind(fs, "127.0.0.1:8080", "127.0.0.1:8081")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := (Flags{MetricsAddr: "127.0.0.1:8080", SecureMetrics: true, ProbeAddr: "127.0.0.1:8081"}); f != want {
		t.Errorf("defaults = %+v, want %+v", f, want)
	}
	if err := fs.Parse([]string{"--" + FlagMetricsBindAddress + "=[fd00::1]:9", "--" + FlagMetricsSecure + "=false", "--" + FlagHealthBindAddress + "=0"}); err != nil {
		t.Fatal(err)
	}
	if want := (Flags{MetricsAddr: "[fd00::1]:9", SecureMetrics: false, ProbeAddr: "0"}); f != want {
		t.Errorf("parsed = %+v, want %+v", f, want)
	}
}

func TestMetricsOptions(t *testing.T) {
	secure := metricsOptions(t, Flags{MetricsAddr: "127.0.0.1:9444", SecureMetrics: true})
	if !secure.SecureServing || secure.FilterProvider == nil || secure.BindAddress != "127.0.0.1:9444" {
		t.Fatalf("secure options = %+v: want HTTPS with the authn/authz filter on 127.0.0.1:9444", secure)
	}
	var c tls.Config
	for _, o := range secure.TLSOpts {
		o(&c)
	}
	if len(c.NextProtos) != 1 || c.NextProtos[0] != "http/1.1" || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("TLS config: NextProtos %v MinVersion %x, want only http/1.1 and TLS 1.2+", c.NextProtos, c.MinVersion)
	}
	plain := metricsOptions(t, Flags{MetricsAddr: ":8080"})
	if plain.SecureServing || plain.FilterProvider != nil || len(plain.TLSOpts) != 0 {
		t.Errorf("plain options = %+v: want HTTP without filter", plain)
	}
}

// A certificate directory that lacks its certificate or key is refused, naming the flag and the
// file: controller-runtime would serve a self-signed certificate instead, without a word.
func TestMetricsCertDirMustHoldTheCertificate(t *testing.T) {
	dir := t.TempDir()
	f := Flags{MetricsAddr: "127.0.0.1:9444", SecureMetrics: true, MetricsCertDir: dir}
	if _, err := f.MetricsOptions(); err == nil || !strings.Contains(err.Error(), "--"+FlagMetricsCertDir+"="+dir) || !strings.Contains(err.Error(), MetricsCertFile) {
		t.Errorf("empty directory: %v, want an error naming the flag and %s", err, MetricsCertFile)
	}
	writeCert(t, dir, "x")
	if err := os.Remove(filepath.Join(dir, MetricsKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.MetricsOptions(); err == nil || !strings.Contains(err.Error(), MetricsKeyFile) {
		t.Errorf("no key: %v, want an error naming %s", err, MetricsKeyFile)
	}
	f.SecureMetrics = false
	if _, err := f.MetricsOptions(); err != nil {
		t.Errorf("plain HTTP reads no certificate: %v", err)
	}
}

// metricsOptions is f.MetricsOptions(), failing the test on an error.
func metricsOptions(t *testing.T, f Flags) metricsserver.Options {
	t.Helper()
	o, err := f.MetricsOptions()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// A metrics server given a certificate directory serves that certificate: a client that
// trusts only its CA and checks the Service name connects, one that trusts another CA does not.
func TestMetricsServeMountedCertificate(t *testing.T) {
	dir := t.TempDir()
	const name = "slicer-webhook-metrics.ns.svc"
	ca := writeCert(t, dir, name)
	other := writeCert(t, t.TempDir(), name)

	addr := freeAddr(t)
	o := metricsOptions(t, Flags{MetricsAddr: addr, SecureMetrics: true, MetricsCertDir: dir})
	if o.CertDir != dir || o.CertName != MetricsCertFile || o.KeyName != MetricsKeyFile {
		t.Fatalf("options = %+v: want the certificate of %s", o, dir)
	}
	serveMetrics(t, o)
	dial := dialer(addr, name)

	if err := dial(ca); err != nil {
		t.Fatalf("TLS with the mounted certificate's CA: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	if err := dial(other); !errors.As(err, &unknown) {
		t.Errorf("TLS with another CA: %v, want an unknown authority error", err)
	}
}

// writeCert writes a certificate for name and its key into dir and returns the CA.
func writeCert(t *testing.T, dir, name string) []byte {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{Host: name, MaxAge: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	leaf, rest := pem.Decode(certPEM)
	if leaf == nil || len(rest) == 0 {
		t.Fatal("expected a certificate and its CA")
	}
	if err := os.WriteFile(filepath.Join(dir, MetricsCertFile), pem.EncodeToMemory(leaf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetricsKeyFile), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return rest
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// serveMetrics serves metrics with the options o until the test ends, without
// the authentication filter: it needs an apiserver, the TLS handshake does not.
func serveMetrics(t *testing.T, o metricsserver.Options) {
	t.Helper()
	o.FilterProvider = nil
	srv, err := metricsserver.NewServer(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Start(t.Context()) }()
	t.Cleanup(func() { <-done }) // t.Context() is cancelled before cleanups run
}

// dialer returns a TLS handshake with the server at addr by a client that
// trusts only the CAs roots and checks the name host. It waits, up to 10 s,
// while the server does not listen yet, then returns the handshake's answer.
func dialer(addr, host string) func(roots []byte) error {
	return func(roots []byte) error {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(roots)
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			var conn *tls.Conn
			conn, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12})
			if err == nil {
				_ = conn.Close()
				return nil
			}
			if !strings.Contains(err.Error(), "connection refused") {
				return err // the server is up: the handshake's own answer
			}
		}
		return err
	}
}
