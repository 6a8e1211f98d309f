// Package certs keeps the webhook's self-managed serving certificate: a CA
// and a serving certificate from client-go's certificate helpers (the ones
// kube-apiserver uses for its self-signed serving certs), stored in a
// Secret, rotated when a third of the validity is left. During a rotation
// the CA bundle holds the new and the previous CA, so the apiserver trusts
// both the pods that still serve the old certificate and the new ones.
package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// Secret keys (kubernetes.io/tls plus the CA bundle).
const (
	CertKey = "tls.crt"
	KeyKey  = "tls.key"
	CAKey   = "ca.crt"
)

// Request describes the wanted serving certificate.
type Request struct {
	// DNSNames the certificate must be valid for (the first is the subject).
	DNSNames []string
	// IPs the certificate must be valid for (HostNetwork mode).
	IPs []net.IP
	// Validity of a new certificate.
	Validity time.Duration
}

// Result is the Secret data to store and when to look again.
type Result struct {
	Data map[string][]byte
	// Rotated is true when a new certificate was issued.
	Rotated bool
	// RenewAt is when the certificate must be renewed.
	RenewAt time.Time
	// NotAfter is the serving certificate's expiry.
	NotAfter time.Time
}

// Ensure returns data holding a certificate that satisfies req and stays
// valid for at least a third of req.Validity after now: current, if it
// does, or a new one.
func Ensure(current map[string][]byte, req Request, now time.Time) (Result, error) {
	if len(req.DNSNames) == 0 || req.Validity <= 0 {
		return Result{}, errors.New("certs: a DNS name and a positive validity are required")
	}
	lookahead := req.Validity / 3
	if leaf, err := verify(current, req, now.Add(lookahead)); err == nil {
		return Result{Data: current, RenewAt: leaf.NotAfter.Add(-lookahead), NotAfter: leaf.NotAfter}, nil
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{
		Host:         req.DNSNames[0],
		AlternateDNS: req.DNSNames[1:],
		AlternateIPs: req.IPs,
		MaxAge:       req.Validity,
	})
	if err != nil {
		return Result{}, fmt.Errorf("certs: generate serving certificate: %w", err)
	}
	blocks := pemBlocks(certPEM)
	if len(blocks) != 2 {
		return Result{}, fmt.Errorf("certs: expected certificate and CA, got %d PEM blocks", len(blocks))
	}
	leaf, err := x509.ParseCertificate(blocks[0].Bytes)
	if err != nil {
		return Result{}, fmt.Errorf("certs: parse new certificate: %w", err)
	}
	bundle := pem.EncodeToMemory(blocks[1])
	// Keep the previous CA while it is still valid: pods serve the old
	// certificate until the kubelet refreshes the mounted Secret.
	for _, b := range pemBlocks(current[CAKey]) {
		if old, err := x509.ParseCertificate(b.Bytes); err == nil && now.Before(old.NotAfter) && !bytes.Equal(b.Bytes, blocks[1].Bytes) {
			bundle = append(bundle, pem.EncodeToMemory(b)...)
			break
		}
	}
	return Result{
		Data:     map[string][]byte{CertKey: certPEM, KeyKey: keyPEM, CAKey: bundle},
		Rotated:  true,
		RenewAt:  leaf.NotAfter.Add(-lookahead),
		NotAfter: leaf.NotAfter,
	}, nil
}

// verify checks that data holds a key pair valid at `at` for every name and
// IP of req, signed by a CA in the bundle.
func verify(data map[string][]byte, req Request, at time.Time) (*x509.Certificate, error) {
	pair, err := tls.X509KeyPair(data[CertKey], data[KeyKey])
	if err != nil {
		return nil, fmt.Errorf("key pair: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data[CAKey]) {
		return nil, errors.New("no CA certificate")
	}
	names := append([]string(nil), req.DNSNames...)
	for _, ip := range req.IPs {
		names = append(names, ip.String())
	}
	for _, n := range names {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: roots, CurrentTime: at}); err != nil {
			return nil, fmt.Errorf("verify for %s: %w", n, err)
		}
	}
	return leaf, nil
}

func pemBlocks(data []byte) []*pem.Block {
	var out []*pem.Block
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if b.Type == certutil.CertificateBlockType {
			out = append(out, b)
		}
	}
}
