package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/slicer-operator/slicer/test/framework/procnet"
)

// slicerBinaries are the executables of Slicer's processes (images/: each
// image runs /usr/local/bin/slicer-<component>; the scheduler's binary has
// the same name for every Kubernetes minor, or a -k8s-1.N suffix outside an image).
var slicerBinaries = []string{"slicer-operator", "slicer-webhook", "slicer-scheduler", "slicer-agent"}

// slicerProcess is a running Slicer process and the TCP sockets it listens on.
type slicerProcess struct {
	pid       string
	binary    string // an element of slicerBinaries
	listeners []procnet.Listener
}

// slicerBinary names the Slicer binary exe (a /proc/<pid>/exe target) runs, or "".
func slicerBinary(exe string) string {
	base := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
	for _, b := range slicerBinaries {
		if base == b || strings.HasPrefix(base, b+"-k8s-") {
			return b
		}
	}
	return ""
}

// slicerProcesses finds every Slicer process on the host and the TCP
// sockets it listens on (processListeners). Needs root.
func slicerProcesses() ([]slicerProcess, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []slicerProcess
	for _, dir := range dirs {
		exe, err := os.Readlink(filepath.Join(dir, "exe"))
		if err != nil {
			continue // a kernel thread, or a process that just exited
		}
		b := slicerBinary(exe)
		if b == "" {
			continue
		}
		p := slicerProcess{pid: filepath.Base(dir), binary: b}
		if p.listeners, err = processListeners(dir); err != nil {
			return nil, fmt.Errorf("%s (pid %s): %w", b, p.pid, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// processListeners lists the TCP sockets the process of /proc/<pid> dir listens on: the LISTEN
// entries of the tables of its own network namespace (net/tcp, tcp6) whose inode is one of
// its open descriptors (fd/). Needs root.
func processListeners(dir string) ([]procnet.Listener, error) {
	inodes := map[uint64]bool{}
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return nil, fmt.Errorf("descriptors: %w", err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err != nil {
			continue // closed since ReadDir
		}
		if inode, ok := procnet.SocketInode(link); ok {
			inodes[inode] = true
		}
	}
	var out []procnet.Listener
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(filepath.Join(dir, "net", table))
		if err != nil {
			return nil, err
		}
		ls, err := procnet.ParseTCP(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", table, err)
		}
		out = append(out, procnet.Owned(ls, inodes)...)
	}
	return out, nil
}

// expectSlicerListenersOnLoopback: no Slicer process listens on an address
// another host could reach. Every component must be running and listening,
// so the check cannot pass by finding nothing.
func expectSlicerListenersOnLoopback(SpecContext) {
	procs, err := slicerProcesses()
	Expect(err).NotTo(HaveOccurred())
	seen := map[string]bool{}
	var offLoopback, report []string
	for _, p := range procs {
		var addrs []string
		for _, l := range p.listeners {
			addrs = append(addrs, l.Addr.String())
			if !l.Loopback() {
				offLoopback = append(offLoopback, fmt.Sprintf("%s (pid %s) on %s", p.binary, p.pid, l.Addr))
			}
		}
		sort.Strings(addrs)
		if len(addrs) > 0 {
			seen[p.binary] = true
		}
		report = append(report, fmt.Sprintf("%s (pid %s): %s", p.binary, p.pid, strings.Join(addrs, " ")))
	}
	GinkgoWriter.Printf("Slicer's TCP listeners:\n  %s\n", strings.Join(report, "\n  "))
	for _, b := range slicerBinaries {
		Expect(seen).To(HaveKey(b), "no listening %s process found; processes: %v", b, report)
	}
	Expect(offLoopback).To(BeEmpty(), "Slicer listeners off loopback")
}
