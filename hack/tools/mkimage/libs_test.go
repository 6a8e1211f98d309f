package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// lddPaths returns the library paths ldd resolves for bin (the reference).
func lddPaths(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Skipf("ldd %s: %v", bin, err)
	}
	var paths []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 3 && fields[1] == "=>":
			paths = append(paths, fields[2])
		case len(fields) >= 1 && strings.HasPrefix(fields[0], "/"):
			paths = append(paths, fields[0]) // the interpreter
		}
	}
	sort.Strings(paths)
	return paths
}

func TestSharedLibsMatchesLdd(t *testing.T) {
	for _, bin := range []string{"/bin/sh", "/usr/bin/openssl"} {
		if _, err := os.Stat(bin); err != nil {
			continue
		}
		t.Run(filepath.Base(bin), func(t *testing.T) {
			want := lddPaths(t, bin)
			if len(want) == 0 {
				t.Skipf("%s is static", bin)
			}
			got, err := SharedLibs([]string{bin})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("SharedLibs(%s) (-ldd +got):\n%s", bin, diff)
			}
		})
	}
}

func TestSharedLibsSkipsNonELF(t *testing.T) {
	script := filepath.Join(t.TempDir(), "run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := SharedLibs([]string{script})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("SharedLibs(script) = %v, want none", got)
	}
	if _, err := SharedLibs([]string{filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("SharedLibs(missing file) succeeded, want an error")
	}
}
