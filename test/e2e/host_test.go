package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// hostSnapshot is what `hack/local-cluster up` may change on the host and
// `down` must restore: mounts, kernel tunables, the host paths the kubelet,
// containerd and the agent use, cgroups, and processes (ours, and any process
// in a container).
type hostSnapshot struct {
	mounts    map[string]bool
	sysctls   map[string]string
	paths     map[string]bool
	cgroups   []string
	processes []string
}

var (
	// kept equal to SYSCTLS in hack/local-cluster
	watchedSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}
	watchedPaths   = []string{"/var/lib/kubelet", "/var/lib/kubelet/pod-resources", "/var/lib/kubelet/device-plugins", "/var/log/containers", "/run/containerd", "/var/run/cdi", "/var/lib/slicer", "/var/lib/cni", "/run/mount"}
)

func takeHostSnapshot() hostSnapshot {
	s := hostSnapshot{mounts: map[string]bool{}, sysctls: map[string]string{}, paths: map[string]bool{}}
	if data, err := os.ReadFile("/proc/mounts"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) >= 3 {
				s.mounts[f[1]+" ("+f[2]+")"] = true
			}
		}
	}
	for _, k := range watchedSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err == nil {
			s.sysctls[k] = strings.TrimSpace(string(v))
		}
	}
	for _, p := range watchedPaths {
		_, err := os.Lstat(p)
		s.paths[p] = err == nil
	}
	cg, _ := filepath.Glob("/sys/fs/cgroup/*/slicer-local")
	if _, err := os.Stat("/sys/fs/cgroup/slicer-local"); err == nil {
		cg = append(cg, "/sys/fs/cgroup/slicer-local")
	}
	s.cgroups = cg
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		exe, err := os.Readlink(filepath.Join(p, "exe"))
		if err != nil {
			continue
		}
		root, _ := os.Readlink(filepath.Join(p, "root"))
		ours := strings.HasPrefix(exe, filepath.Join(repoRoot, "bin", "k8s")+"/") || strings.HasPrefix(exe, filepath.Join(repoRoot, "bin", "containerd")+"/") ||
			strings.HasPrefix(exe, filepath.Join(repoRoot, "bin", "nfd")+"/") || exe == filepath.Join(repoRoot, "bin", "tools", "relay")
		if ours || (root != "" && root != "/") {
			s.processes = append(s.processes, fmt.Sprintf("%s (pid %s, root %s)", exe, filepath.Base(p), root))
		}
	}
	sort.Strings(s.processes)
	return s
}

// diff lists how s differs from before, one readable line per difference.
func (s hostSnapshot) diff(before hostSnapshot) []string {
	var out []string
	for m := range s.mounts {
		if !before.mounts[m] {
			out = append(out, "mount left behind: "+m)
		}
	}
	for m := range before.mounts {
		if !s.mounts[m] {
			out = append(out, "mount gone: "+m)
		}
	}
	for k, v := range before.sysctls {
		if s.sysctls[k] != v {
			out = append(out, fmt.Sprintf("sysctl %s: %s, was %s", k, s.sysctls[k], v))
		}
	}
	for p, had := range before.paths {
		if s.paths[p] != had {
			out = append(out, fmt.Sprintf("path %s: exists=%t, was %t", p, s.paths[p], had))
		}
	}
	if len(s.cgroups) > len(before.cgroups) {
		out = append(out, fmt.Sprintf("cgroups left behind: %v", s.cgroups))
	}
	old := map[string]bool{}
	for _, p := range before.processes {
		old[p] = true
	}
	for _, p := range s.processes {
		if !old[p] {
			out = append(out, "process left behind: "+p)
		}
	}
	sort.Strings(out)
	return out
}
