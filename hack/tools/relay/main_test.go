package main

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want endpoint
		ok   bool
	}{
		{"tcp:127.0.0.1:16443", endpoint{"tcp", "127.0.0.1:16443"}, true},
		{"tcp:[::1]:80", endpoint{"tcp", "[::1]:80"}, true},
		{"unix:/run/x.sock", endpoint{"unix", "/run/x.sock"}, true},
		{"tcp:0.0.0.0:80", endpoint{}, false},
		{"tcp::80", endpoint{}, false},
		{"tcp:10.0.0.1:80", endpoint{}, false},
		{"udp:127.0.0.1:53", endpoint{}, false},
		{"unix:", endpoint{}, false},
		{"127.0.0.1:80", endpoint{}, false},
	} {
		got, err := parseEndpoint(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseEndpoint(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestRelaysBothWays(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	sock := filepath.Join(t.TempDir(), "r.sock")
	go func() { _ = run("unix:"+sock, "tcp:"+echo.Addr().String(), slog.New(slog.DiscardHandler)) }()
	var c net.Conn
	for range 200 {
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("dial relay: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.UnixConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "ping" {
		t.Fatalf("echo through relay = %q, %v; want ping", got, err)
	}
}
