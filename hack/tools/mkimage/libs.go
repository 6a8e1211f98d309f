package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// libDirs are searched, in order, for the DT_NEEDED libraries of a binary.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// SharedLibs returns the host paths of the ELF interpreter and every shared
// library the given binaries need, transitively, sorted. Statically linked
// binaries and non-ELF files (scripts) contribute nothing. Each path is taken
// as the binary would see it at run time, so the image gets it at the same path.
func SharedLibs(binaries []string) ([]string, error) {
	seen := map[string]bool{}
	interps := map[string]string{} // base name -> interpreter path (libc names it in DT_NEEDED)
	queue := append([]string(nil), binaries...)
	for len(queue) > 0 {
		bin := queue[0]
		queue = queue[1:]
		f, err := elf.Open(bin)
		if err != nil {
			var fe *elf.FormatError
			if errors.As(err, &fe) {
				continue // not ELF
			}
			return nil, fmt.Errorf("open %s: %w", bin, err)
		}
		interp, needed, err := dynamicDeps(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		var deps []string
		if interp != "" {
			deps = append(deps, interp)
			interps[filepath.Base(interp)] = interp
		}
		for _, n := range needed {
			if p, ok := interps[n]; ok {
				deps = append(deps, p)
				continue
			}
			p, err := findLib(n)
			if err != nil {
				return nil, fmt.Errorf("%s needs %s: %w", bin, n, err)
			}
			deps = append(deps, p)
		}
		for _, d := range deps {
			if !seen[d] {
				seen[d] = true
				queue = append(queue, d)
			}
		}
	}
	libs := make([]string, 0, len(seen))
	for p := range seen {
		libs = append(libs, p)
	}
	sort.Strings(libs)
	return libs, nil
}

func dynamicDeps(f *elf.File) (interp string, needed []string, err error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", nil, fmt.Errorf("read PT_INTERP: %w", err)
		}
		for len(b) > 0 && b[len(b)-1] == 0 {
			b = b[:len(b)-1]
		}
		interp = string(b)
	}
	if f.Section(".dynamic") == nil {
		return interp, nil, nil
	}
	needed, err = f.ImportedLibraries()
	if err != nil {
		return "", nil, fmt.Errorf("read DT_NEEDED: %w", err)
	}
	return interp, needed, nil
}

func findLib(name string) (string, error) {
	for _, d := range libDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %v", libDirs)
}
