package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/slicer-operator/slicer/test/framework"
)

// covers W10 (without the apiserver; the envtest suite does it through admission)
func TestServerReloadsCertificate(t *testing.T) {
	ca, err := framework.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first, err := ca.ServingCert(time.Now().Add(2 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	srv, watcher, err := NewServer(ServerOptions{Host: "127.0.0.1", Port: port, CertDir: dir, Settings: translate}, m, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- watcher.Start(ctx) }()
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("server: %v", err)
			}
		}
	})
	eventually(t, "server started", func() error { return srv.StartedChecker()(nil) })

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
	addr := "https://127.0.0.1:" + strconv.Itoa(port)
	body := review(t, "u", admissionv1.Create, "Pod", makePod().Container("app", both(nv1g, "1")).Obj())

	check := func(want *framework.ServingCert) {
		t.Helper()
		eventually(t, "serving the expected certificate", func() error {
			serial, err := post(client, addr, body)
			if err != nil {
				return err
			}
			if serial.Cmp(want.Serial) != 0 {
				return fmt.Errorf("served serial %v, want %v", serial, want.Serial)
			}
			return nil
		})
		if got, want := testutil.ToFloat64(m.certExpiry), float64(want.NotAfter.Unix()); got != want {
			t.Errorf("slicer_webhook_certificate_expiration_timestamp_seconds = %v, want %v", got, want)
		}
	}
	check(first)

	// HTTP/2 is refused (CVE-2023-44487, CVE-2023-39325), as on every other Slicer listener
	// (internal/serving): a client that offers h2 first gets HTTP/1.1.
	conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.ConnectionState().NegotiatedProtocol; got != "http/1.1" {
		t.Errorf("negotiated protocol %q with a client offering h2, want http/1.1", got)
	}
	_ = conn.Close()

	second, err := ca.ServingCert(time.Now().Add(5 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := second.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	check(second)
}

// post sends a MIG pod review and returns the serial of the certificate served.
func post(c *http.Client, addr string, body []byte) (*big.Int, error) {
	resp, err := c.Post(addr+PathMutatePod, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	out := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if out.Response == nil || !out.Response.Allowed || len(out.Response.Patch) == 0 {
		return nil, fmt.Errorf("unexpected answer %+v", out.Response)
	}
	return resp.TLS.PeerCertificates[0].SerialNumber, nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// eventually polls f until it succeeds; it fails the test after a minute.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}
