// Package certs keeps the webhook's and the metrics endpoints' self-managed serving
// certificates: a CA and a serving certificate signed by it, ECDSA P-256 keys, stored in a
// Secret, rotated when a third of the validity is left. During a rotation the CA bundle holds
// the new and the previous CA, so the apiserver (and Prometheus) trust both the pods that still
// serve the old certificate and the new ones.
//
// ECDSA, not RSA: an RSA-2048 key pair costs 0.1–0.25 s to generate (0.4 s under the race
// detector) and every install issues four certificates of two keys each; a P-256 pair costs
// under a millisecond. Every client of these endpoints is Go's TLS stack (kube-apiserver's
// webhook client, Prometheus), which accepts both.
package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"time"
)

// Secret keys (kubernetes.io/tls plus the CA bundle).
const (
	CertKey = "tls.crt"
	KeyKey  = "tls.key"
	CAKey   = "ca.crt"
)

// PEM block types of what Ensure writes.
const (
	certificateBlock = "CERTIFICATE"
	privateKeyBlock  = "PRIVATE KEY" // PKCS #8
)

// clockSkew backdates a new certificate's NotBefore, so that a node whose clock runs a little
// behind still accepts it.
const clockSkew = time.Hour

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
	certPEM, keyPEM, err := issue(req, now)
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
		if b.Type == certificateBlock {
			out = append(out, b)
		}
	}
}

// issue returns a new CA and a serving certificate signed by it for every DNS name and IP of
// req (the first DNS name is the subject), valid from an hour before now for req.Validity:
// certPEM holds the serving certificate, then the CA's; keyPEM the serving key.
func issue(req Request, now time.Time) (certPEM, keyPEM []byte, err error) {
	from := now.Add(-clockSkew)
	caKey, ca, err := keyAndTemplate(fmt.Sprintf("%s-ca@%d", req.DNSNames[0], now.Unix()), from, req.Validity)
	if err != nil {
		return nil, nil, fmt.Errorf("CA: %w", err)
	}
	ca.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign
	ca.IsCA = true
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	key, leaf, err := keyAndTemplate(fmt.Sprintf("%s@%d", req.DNSNames[0], now.Unix()), from, req.Validity)
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate: %w", err)
	}
	leaf.KeyUsage = x509.KeyUsageDigitalSignature
	leaf.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	leaf.DNSNames = req.DNSNames
	leaf.IPAddresses = req.IPs
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode serving key: %w", err)
	}
	certPEM = append(pem.EncodeToMemory(&pem.Block{Type: certificateBlock, Bytes: leafDER}),
		pem.EncodeToMemory(&pem.Block{Type: certificateBlock, Bytes: caDER})...)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: privateKeyBlock, Bytes: keyDER}), nil
}

// keyAndTemplate returns a new P-256 key and a certificate template named cn, with a random
// serial, valid from `from` for validity; the caller adds its usages.
func keyAndTemplate(cn string, from time.Time, validity time.Duration) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	return key, &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             from,
		NotAfter:              from.Add(validity),
		BasicConstraintsValid: true,
	}, nil
}

// serialNumber is a random serial in [1, 2^63-1), as RFC 5280 asks (positive, unique per CA).
func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64-1))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
