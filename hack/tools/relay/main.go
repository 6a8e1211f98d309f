// Command relay accepts connections on one address and copies each, both ways, to a
// connection it opens to another. Addresses are "tcp:HOST:PORT" (HOST must be a loopback
// address: the network rule of docs/listeners.md) or "unix:PATH".
//
//	relay -listen unix:/run/x/16443.sock -to tcp:127.0.0.1:16443
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
)

// endpoint is a parsed "tcp:HOST:PORT" or "unix:PATH".
type endpoint struct{ network, address string }

func parseEndpoint(s string) (endpoint, error) {
	network, address, ok := strings.Cut(s, ":")
	switch {
	case !ok || address == "":
		return endpoint{}, fmt.Errorf("address %q: want tcp:HOST:PORT or unix:PATH", s)
	case network == "unix":
		return endpoint{network, address}, nil
	case network != "tcp":
		return endpoint{}, fmt.Errorf("address %q: network %q is neither tcp nor unix", s, network)
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return endpoint{}, fmt.Errorf("address %q: %w", s, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return endpoint{}, fmt.Errorf("address %q: host must be a loopback IP", s)
	}
	return endpoint{network, address}, nil
}

func main() {
	listen := flag.String("listen", "", "where to accept: tcp:127.0.0.1:PORT or unix:PATH")
	to := flag.String("to", "", "where to connect: tcp:127.0.0.1:PORT or unix:PATH")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*listen, *to, log); err != nil {
		log.Error("relay failed", "err", err)
		os.Exit(1)
	}
}

func run(listen, to string, log *slog.Logger) error {
	from, err := parseEndpoint(listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	target, err := parseEndpoint(to)
	if err != nil {
		return fmt.Errorf("-to: %w", err)
	}
	if from.network == "unix" {
		if err := os.Remove(from.address); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale socket: %w", err)
		}
	}
	l, err := net.Listen(from.network, from.address)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("relaying", "listen", listen, "to", to)
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		go pipe(c, target, log)
	}
}

// pipe copies c to a new connection to target and back, until either side closes.
func pipe(c net.Conn, target endpoint, log *slog.Logger) {
	defer c.Close()
	d, err := net.Dial(target.network, target.address)
	if err != nil {
		log.Warn("dial target", "err", err)
		return
	}
	defer d.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(d, c)
		closeWrite(d)
		close(done)
	}()
	_, _ = io.Copy(c, d)
	closeWrite(c)
	<-done
}

// closeWrite half-closes conn when it can, so the peer sees EOF.
func closeWrite(conn net.Conn) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
