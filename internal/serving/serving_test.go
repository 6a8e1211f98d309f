package serving

import (
	"crypto/tls"
	"flag"
	"testing"
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
	secure := Flags{MetricsAddr: "127.0.0.1:9444", SecureMetrics: true}.MetricsOptions()
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
	plain := Flags{MetricsAddr: ":8080"}.MetricsOptions()
	if plain.SecureServing || plain.FilterProvider != nil || len(plain.TLSOpts) != 0 {
		t.Errorf("plain options = %+v: want HTTP without filter", plain)
	}
}
