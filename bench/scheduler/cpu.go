package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// CPU time per scheduled pod is what this bench compares across phases: on a shared 2-core
// machine pods/s moves with whatever else runs, while the CPU the apiserver and the scheduler
// spend per pod does not (much).
//
// The apiserver and etcd are child processes of the bench (test/framework starts them), so
// their CPU is read from /proc/<pid>/stat at both ends of the measured window. The scheduler
// runs in the bench's own process, next to the pod creators, the bound watch, the counting
// proxies and the fake agent: its share is the CPU profile's samples whose goroutines carry the
// label component=scheduler, which every goroutine server.Start creates inherits (see
// schedulerLabels).

// componentLabel is the pprof label key that marks the scheduler's goroutines.
const componentLabel = "component"

// schedulerLabels are set around server.Start, so every goroutine it starts (the scheduling
// loop, its informers, the plugin's, their HTTP connections) inherits them.
var schedulerLabels = pprof.Labels(componentLabel, "scheduler")

// userHZ is the unit of /proc/<pid>/stat's utime and stime: USER_HZ, 100 on Linux.
const userHZ = 100

// cpuUse is the CPU time spent during one measured window.
type cpuUse struct {
	apiserver, etcd time.Duration // the processes' user + system time
	scheduler       time.Duration // profile samples labelled component=scheduler
	process         time.Duration // every profile sample of the bench's process
}

// perPod divides each figure by n pods.
func (c cpuUse) perPod(n int) cpuUse {
	d := time.Duration(max(n, 1))
	return cpuUse{apiserver: c.apiserver / d, etcd: c.etcd / d, scheduler: c.scheduler / d, process: c.process / d}
}

// cpuMeter measures one window; stop ends it.
type cpuMeter struct {
	buf            bytes.Buffer
	pids           map[string]int // "kube-apiserver", "etcd" → pid
	before         map[string]time.Duration
	profileToWrite string
}

// startCPUMeter starts the window: the child processes' CPU is read and the process's CPU
// profile starts (written to profilePath as well when it is set).
func startCPUMeter(profilePath string) (*cpuMeter, error) {
	m := &cpuMeter{profileToWrite: profilePath, before: map[string]time.Duration{}}
	pids, err := childPIDs("kube-apiserver", "etcd")
	if err != nil {
		return nil, err
	}
	m.pids = pids
	for name, pid := range pids {
		if m.before[name], err = processCPU(pid); err != nil {
			return nil, err
		}
	}
	if err := pprof.StartCPUProfile(&m.buf); err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return m, nil
}

// stop ends the window and returns what was spent in it.
func (m *cpuMeter) stop() (cpuUse, error) {
	pprof.StopCPUProfile()
	var use cpuUse
	var errs []error
	for name, pid := range m.pids {
		after, err := processCPU(pid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch name {
		case "kube-apiserver":
			use.apiserver = after - m.before[name]
		case "etcd":
			use.etcd = after - m.before[name]
		}
	}
	if m.profileToWrite != "" {
		if err := os.WriteFile(m.profileToWrite, m.buf.Bytes(), 0o600); err != nil {
			errs = append(errs, fmt.Errorf("cpu profile: %w", err))
		}
	}
	p, err := profile.Parse(bytes.NewReader(m.buf.Bytes()))
	if err != nil {
		return use, errors.Join(append(errs, fmt.Errorf("parse cpu profile: %w", err))...)
	}
	use.scheduler, use.process = profileCPU(p)
	return use, errors.Join(errs...)
}

// profileCPU sums a CPU profile's samples: those of the scheduler's goroutines, and all.
func profileCPU(p *profile.Profile) (scheduler, all time.Duration) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, 0
	}
	for _, s := range p.Sample {
		v := time.Duration(s.Value[idx])
		all += v
		for _, l := range s.Label[componentLabel] {
			if l == "scheduler" {
				scheduler += v
			}
		}
	}
	return scheduler, all
}

// childPIDs finds the bench's child processes by name (test/framework starts one apiserver and
// one etcd per phase, and stops them before the next).
func childPIDs(names ...string) (map[string]int, error) {
	self := os.Getpid()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	found := map[string]int{}
	for _, path := range stats {
		comm, ppid, _, err := readStat(path)
		if err != nil || ppid != self {
			continue // a process that ended meanwhile, or not ours
		}
		for _, n := range names {
			if comm == n {
				if prev, dup := found[n]; dup {
					return nil, fmt.Errorf("two child processes named %s (%d, %s)", n, prev, path)
				}
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
				found[n] = pid
			}
		}
	}
	for _, n := range names {
		if _, ok := found[n]; !ok {
			return nil, fmt.Errorf("no child process named %s: is the control plane running?", n)
		}
	}
	return found, nil
}

// processCPU is a process's user + system CPU time so far.
func processCPU(pid int) (time.Duration, error) {
	_, _, cpu, err := readStat(fmt.Sprintf("/proc/%d/stat", pid))
	return cpu, err
}

// readStat parses /proc/<pid>/stat (proc(5)): the command name in parentheses, then the
// fields from state on; ppid is field 4, utime and stime fields 14 and 15.
func readStat(path string) (comm string, ppid int, cpu time.Duration, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", 0, 0, fmt.Errorf("read %s: %w", path, err)
	}
	s := string(data)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, 0, fmt.Errorf("parse %s: no command name", path)
	}
	comm = s[open+1 : closing]
	rest := strings.Fields(s[closing+1:]) // rest[0] is field 3 (state)
	if len(rest) < 13 {
		return "", 0, 0, fmt.Errorf("parse %s: %d fields", path, len(rest)+2)
	}
	ppid, err1 := strconv.Atoi(rest[1])
	utime, err2 := strconv.ParseInt(rest[11], 10, 64)
	stime, err3 := strconv.ParseInt(rest[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", 0, 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return comm, ppid, time.Duration(utime+stime) * time.Second / userHZ, nil
}

// withSchedulerLabels runs f with the scheduler's pprof labels on the calling goroutine, so the
// goroutines f starts inherit them.
func withSchedulerLabels(ctx context.Context, f func(context.Context)) {
	pprof.Do(ctx, schedulerLabels, f)
}
