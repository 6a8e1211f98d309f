package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"
)

func TestEnsure(t *testing.T) {
	req := Request{DNSNames: []string{"slicer-webhook.ns.svc"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: 365 * 24 * time.Hour}
	now := time.Now()
	first, err := Ensure(nil, req, now)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Rotated {
		t.Fatal("no certificate issued for empty data")
	}
	if _, err := verify(first.Data, req, now); err != nil {
		t.Fatalf("issued certificate does not verify: %v", err)
	}
	again, err := Ensure(first.Data, req, now.Add(time.Hour))
	if err != nil || again.Rotated {
		t.Fatalf("valid certificate replaced: rotated=%v err=%v", again.Rotated, err)
	}
	if want := first.NotAfter.Add(-req.Validity / 3); !again.RenewAt.Equal(want) {
		t.Errorf("RenewAt = %v, want %v", again.RenewAt, want)
	}
	// A new name (HostNetwork switched on with another address) forces a new certificate.
	other := req
	other.IPs = []net.IP{net.ParseIP("10.0.0.1")}
	if r, err := Ensure(first.Data, other, now); err != nil || !r.Rotated {
		t.Fatalf("certificate without the new IP kept: rotated=%v err=%v", r.Rotated, err)
	}
	// Past the renewal point the certificate rotates and the bundle keeps
	// the previous CA, which is still valid.
	late := first.RenewAt.Add(time.Minute)
	rot, err := Ensure(first.Data, req, late)
	if err != nil || !rot.Rotated {
		t.Fatalf("not rotated at %v: %v", late, err)
	}
	if n := len(pemBlocks(rot.Data[CAKey])); n != 2 {
		t.Fatalf("CA bundle has %d certificates, want new + previous", n)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rot.Data[CAKey])
	oldLeaf, err := x509.ParseCertificate(pemBlocks(first.Data[CertKey])[0].Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oldLeaf.Verify(x509.VerifyOptions{DNSName: req.DNSNames[0], Roots: pool, CurrentTime: now}); err != nil {
		t.Errorf("old certificate not trusted by the rotated bundle: %v", err)
	}
	// Garbage is replaced, not an error.
	if r, err := Ensure(map[string][]byte{CertKey: []byte("x")}, req, now); err != nil || !r.Rotated {
		t.Fatalf("garbage kept: %v", err)
	}
	if _, err := Ensure(nil, Request{}, now); err == nil {
		t.Error("empty request accepted")
	}
}

// The certificates are dated from the caller's clock (an hour early, for skew), signed by the
// CA in the bundle, serve TLS only, and carry an ECDSA P-256 key.
func TestIssueShape(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	req := Request{DNSNames: []string{"a.ns.svc", "a.ns.svc.cluster.local"}, IPs: []net.IP{net.ParseIP("10.0.0.7")}, Validity: 48 * time.Hour}
	got, err := Ensure(nil, req, now)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(got.Data[CertKey], got.Data[KeyKey])
	if err != nil {
		t.Fatal(err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		t.Fatalf("serving key is %T, want an ECDSA P-256 key", pair.PrivateKey)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.NotBefore.Equal(now.Add(-clockSkew)) || !leaf.NotAfter.Equal(now.Add(-clockSkew).Add(req.Validity)) || !got.NotAfter.Equal(leaf.NotAfter) {
		t.Errorf("valid %v to %v (result says %v), want from an hour before %v for %v", leaf.NotBefore, leaf.NotAfter, got.NotAfter, now, req.Validity)
	}
	if leaf.IsCA || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("serving certificate: CA %v, extended key usage %v", leaf.IsCA, leaf.ExtKeyUsage)
	}
	if len(leaf.DNSNames) != 2 || len(leaf.IPAddresses) != 1 || leaf.Subject.CommonName == "" {
		t.Errorf("names %v %v, subject %q", leaf.DNSNames, leaf.IPAddresses, leaf.Subject.CommonName)
	}
	if len(pair.Certificate) != 2 || !bytes.Equal(pemBlocks(got.Data[CAKey])[0].Bytes, pair.Certificate[1]) {
		t.Error("tls.crt does not carry the CA of ca.crt after the serving certificate")
	}
	ca, err := x509.ParseCertificate(pair.Certificate[1])
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || leaf.CheckSignatureFrom(ca) != nil || leaf.SerialNumber.Sign() <= 0 || leaf.SerialNumber.Cmp(ca.SerialNumber) == 0 {
		t.Errorf("CA %v, signature %v, serials %v and %v", ca.IsCA, leaf.CheckSignatureFrom(ca), leaf.SerialNumber, ca.SerialNumber)
	}
}
