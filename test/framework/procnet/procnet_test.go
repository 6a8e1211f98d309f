package procnet

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Tables as a little-endian (x86-64, arm64) kernel prints them.
const (
	tcp4 = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:24DB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 00000000:24DC 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 100 0 0 10 0
   2: 0100007F:24DB 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
   3: 0A00000A:2BA6 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1004 1 0000000000000000 100 0 0 10 0
   4: 0200007F:2BA7 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65532        0 1005 1 0000000000000000 100 0 0 10 0
`
	tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:24DD 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2001 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:24DE 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2002 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:24DF 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2003 1 0000000000000000 100 0 0 10 0
   3: 000000FD000000000000000010000000:24E0 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2004 1 0000000000000000 100 0 0 10 0
`
)

func TestParseTCP(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table string
		want  []string // addr inode loopback
	}{
		{"tcp", tcp4, []string{
			"127.0.0.1:9435 1001 true",
			"0.0.0.0:9436 1002 false",
			"10.0.0.10:11174 1004 false",
			"127.0.0.2:11175 1005 true",
		}},
		{"tcp6", tcp6, []string{
			"[::1]:9437 2001 true",
			"[::]:9438 2002 false",
			"[::ffff:127.0.0.1]:9439 2003 true",
			"[fd00::10]:9440 2004 false",
		}},
		{"header only", "  sl  local_address rem_address   st\n", nil},
	} {
		ls, err := parseTCP([]byte(tc.table), binary.LittleEndian)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, l := range ls {
			got = append(got, fmt.Sprintf("%s %d %t", l.Addr, l.Inode, l.Loopback()))
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// A big-endian kernel prints the same address with its words unswapped.
func TestParseTCPBigEndian(t *testing.T) {
	table := "header\n   0: 7F000001:24DB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7 1\n"
	ls, err := parseTCP([]byte(table), binary.BigEndian)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Listener{{Addr: netip.MustParseAddrPort("127.0.0.1:9435"), Inode: 7}}; !cmp.Equal(want, ls, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })) {
		t.Errorf("got %v, want %v", ls, want)
	}
}

func TestParseTCPRejectsGarbage(t *testing.T) {
	for _, line := range []string{
		"   0: 0100007F:24DB 00000000:0000 0A",                                                    // too few fields
		"   0: 0100007F 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 7 1",          // no port
		"   0: 01007F:24DB 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 7 1",       // 6 hex digits
		"   0: 0100007F:24DB 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 seven 1", // inode
		"   0: 0100007F:FFFFF 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 7 1",    // port over 16 bits
	} {
		if _, err := parseTCP([]byte("header\n"+line+"\n"), binary.LittleEndian); err == nil {
			t.Errorf("parsed %q without error", line)
		}
	}
}

func TestSocketInode(t *testing.T) {
	for link, want := range map[string]uint64{"socket:[12345]": 12345, "socket:[]": 0, "pipe:[12]": 0, "/dev/null": 0, "socket:[12": 0} {
		got, ok := SocketInode(link)
		if got != want || ok != (want != 0) {
			t.Errorf("SocketInode(%q) = %d, %t", link, got, ok)
		}
	}
}

func TestOwned(t *testing.T) {
	ls, err := parseTCP([]byte(tcp4), binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	got := Owned(ls, map[uint64]bool{1002: true, 1005: true, 9999: true})
	if len(got) != 2 || got[0].Inode != 1002 || got[1].Inode != 1005 {
		t.Errorf("Owned = %v, want inodes 1002 and 1005", got)
	}
}
