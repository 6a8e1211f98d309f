// Package procnet reads Linux's TCP socket tables (/proc/<pid>/net/tcp and
// tcp6) and a process's socket descriptors, so a test can tell which
// addresses a process listens on. The parsers are pure; the e2e suite does
// the reading (as root, since other users' fd links are not readable).
package procnet

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// tcpListen is the "st" column of a socket in LISTEN state
// (TCP_LISTEN in the kernel's include/net/tcp_states.h).
const tcpListen = "0A"

// Listener is one listening TCP socket.
type Listener struct {
	Addr  netip.AddrPort
	Inode uint64
}

// Loopback reports whether l accepts connections from this host only
// (127.0.0.0/8, ::1, or IPv4-mapped loopback).
func (l Listener) Loopback() bool { return l.Addr.Addr().Unmap().IsLoopback() }

func (l Listener) String() string { return fmt.Sprintf("%s (inode %d)", l.Addr, l.Inode) }

// ParseTCP returns the sockets in LISTEN state of a /proc/net/tcp or
// /proc/net/tcp6 table. The kernel prints addresses as 32-bit words in the
// host's byte order.
func ParseTCP(table []byte) ([]Listener, error) {
	return parseTCP(table, binary.NativeEndian)
}

func parseTCP(table []byte, order binary.ByteOrder) ([]Listener, error) {
	var out []Listener
	sc := bufio.NewScanner(bytes.NewReader(table))
	header := true
	for sc.Scan() {
		line := sc.Text()
		if header { // "  sl  local_address rem_address   st ..."
			header = false
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 10 {
			return nil, fmt.Errorf("socket table line %q: %d fields, want at least 10", line, len(f))
		}
		if f[3] != tcpListen {
			continue
		}
		addr, err := parseAddr(f[1], order)
		if err != nil {
			return nil, fmt.Errorf("socket table line %q: %w", line, err)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("socket table line %q: inode: %w", line, err)
		}
		out = append(out, Listener{Addr: addr, Inode: inode})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read socket table: %w", err)
	}
	return out, nil
}

// parseAddr parses "0100007F:1F90" (IPv4) or 32 hex digits and a port (IPv6).
func parseAddr(s string, order binary.ByteOrder) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q: no port", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: port: %w", s, err)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q: want 8 or 32 hex digits", s)
	}
	// Each 4-byte word was printed as a number in host order: turn it back
	// into the bytes it was in memory (network order).
	ip := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		order.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// SocketInode returns the inode of a /proc/<pid>/fd/<n> link target
// "socket:[12345]"; false for any other file.
func SocketInode(link string) (uint64, bool) {
	rest, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, "]")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// Owned returns the listeners whose inode is in inodes (a process's
// sockets), in table order.
func Owned(listeners []Listener, inodes map[uint64]bool) []Listener {
	var out []Listener
	for _, l := range listeners {
		if inodes[l.Inode] {
			out = append(out, l)
		}
	}
	return out
}
