// Command mkimage builds a single-layer OCI image archive from local files,
// without a registry or a container engine. The archive (a tar of an OCI image
// layout whose index carries the io.containerd.image.name annotation) imports
// with `ctr -n k8s.io images import ARCHIVE`.
//
// A component image is "the built binary + entrypoint":
//
//	mkimage -o .local/images/slicer-agent.tar -name localhost/slicer-agent:dev \
//	  -entrypoint /slicer-agent -file /slicer-agent=bin/slicer-agent
//
// Flags that take a value may be repeated:
//
//	-file /path/in/image=host/path   regular file, mode copied from the host file
//	-symlink /path/in/image=target   symbolic link
//	-dir /path/in/image              empty directory (parents are added for every entry)
//	-env KEY=VALUE                   environment variable in the image config
//	-entrypoint ARG, -cmd ARG        one argv element each, in order
//	-libs                            also add the ELF interpreter and shared libraries
//	                                 the -file binaries need (cgo builds), at their host paths
//	-label KEY=VALUE                 image label
//	-containerfile PATH              take the labels, USER and ENTRYPOINT from PATH's final
//	                                 stage (-build-arg KEY=VALUE overrides its ARGs), and
//	                                 refuse to write an image that fails CheckImage (a root
//	                                 USER passes only when the Containerfile explains it)
//
// The layer is deterministic: entries sorted, owned by 0:0, modification time 0.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// Spec describes one image.
type Spec struct {
	Name       string   // image reference, e.g. localhost/pause:dev
	Entrypoint []string // image config Entrypoint
	Cmd        []string // image config Cmd
	Env        []string // KEY=VALUE
	WorkingDir string
	User       string
	Labels     map[string]string
	Entries    []Entry // layer contents
}

// Entry is one layer entry; exactly one of Source (a host file), Link (a
// symlink target) is set, or neither for a directory.
type Entry struct {
	Path   string // absolute path in the image
	Source string
	Link   string
}

func main() {
	var (
		out                                  string
		spec                                 Spec
		files, links, dirs, envs, entry, cmd list
		labels, buildArgs                    list
		containerfile                        string
		libs                                 bool
	)
	flag.StringVar(&out, "o", "", "output archive (required)")
	flag.StringVar(&spec.Name, "name", "", "image name, e.g. localhost/slicer-agent:dev (required)")
	flag.StringVar(&spec.WorkingDir, "workdir", "/", "working directory")
	flag.StringVar(&spec.User, "user", "", "user (e.g. 65532:65532); empty = image default (root)")
	flag.Var(&files, "file", "/path/in/image=host/file (repeatable)")
	flag.Var(&links, "symlink", "/path/in/image=target (repeatable)")
	flag.Var(&dirs, "dir", "/path/in/image (repeatable)")
	flag.Var(&envs, "env", "KEY=VALUE (repeatable)")
	flag.Var(&entry, "entrypoint", "entrypoint argv element (repeatable, in order)")
	flag.Var(&cmd, "cmd", "cmd argv element (repeatable, in order)")
	flag.Var(&labels, "label", "KEY=VALUE image label (repeatable)")
	flag.StringVar(&containerfile, "containerfile", "", "Containerfile whose final stage gives the labels, USER and ENTRYPOINT; the image must pass the certification checks")
	flag.Var(&buildArgs, "build-arg", "KEY=VALUE for the -containerfile's ARGs (repeatable)")
	flag.BoolVar(&libs, "libs", false, "add the ELF interpreter and shared libraries the -file binaries need")
	flag.Parse()
	if out == "" || spec.Name == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	spec.Entrypoint, spec.Cmd = entry, cmd
	var err error
	if spec.Labels, err = parseKV("label", labels); err != nil {
		fail(err)
	}
	allowRoot := false
	if containerfile != "" {
		args, err := parseKV("build-arg", buildArgs)
		if err != nil {
			fail(err)
		}
		c, err := ReadContainerfile(containerfile, args)
		if err != nil {
			fail(err)
		}
		for k, v := range c.Labels {
			if _, set := spec.Labels[k]; !set {
				spec.Labels[k] = v
			}
		}
		if len(spec.Entrypoint) == 0 {
			spec.Entrypoint = c.Entrypoint
		}
		if spec.User == "" {
			spec.User = c.User
		}
		allowRoot = c.RootExplained
	}
	spec.Env = append([]string{"PATH=/bin:/usr/bin:/sbin:/usr/sbin"}, envs...)
	for _, f := range files {
		dst, src, ok := strings.Cut(f, "=")
		if !ok {
			fail(fmt.Errorf("-file %q: want /path/in/image=host/file", f))
		}
		spec.Entries = append(spec.Entries, Entry{Path: dst, Source: src})
	}
	if libs {
		var bins []string
		for _, e := range spec.Entries {
			bins = append(bins, e.Source)
		}
		paths, err := SharedLibs(bins)
		if err != nil {
			fail(err)
		}
		for _, p := range paths {
			spec.Entries = append(spec.Entries, Entry{Path: p, Source: p})
		}
	}
	for _, l := range links {
		dst, target, ok := strings.Cut(l, "=")
		if !ok {
			fail(fmt.Errorf("-symlink %q: want /path/in/image=target", l))
		}
		spec.Entries = append(spec.Entries, Entry{Path: dst, Link: target})
	}
	for _, d := range dirs {
		spec.Entries = append(spec.Entries, Entry{Path: d})
	}
	img, err := Image(spec)
	if err != nil {
		fail(err)
	}
	if containerfile != "" {
		if err := CheckImage(img, allowRoot); err != nil {
			fail(fmt.Errorf("%s does not pass the certification checks: %w", spec.Name, err))
		}
	}
	digest, err := Write(img, spec.Name, out)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s %s %s\n", out, spec.Name, digest)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mkimage:", err)
	os.Exit(1)
}

// Build writes the image described by spec as an OCI archive to out and
// returns the manifest digest.
func Build(spec Spec, out string) (v1.Hash, error) {
	img, err := Image(spec)
	if err != nil {
		return v1.Hash{}, err
	}
	return Write(img, spec.Name, out)
}

// Image assembles the single-layer image spec describes.
func Image(spec Spec) (v1.Image, error) {
	layerTar, err := layerBytes(spec.Entries)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{CreatedBy: "mkimage", Created: v1.Time{Time: time.Unix(0, 0).UTC()}},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.Env = spec.Env
	cf.Config.WorkingDir = spec.WorkingDir
	cf.Config.User = spec.User
	cf.Config.Labels = spec.Labels
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// Write writes img as an OCI archive named name to out and returns its
// manifest digest.
func Write(img v1.Image, name, out string) (v1.Hash, error) {
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("digest: %w", err)
	}

	dir, err := os.MkdirTemp(filepath.Dir(out), ".mkimage-")
	if err != nil {
		return v1.Hash{}, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("layout: %w", err)
	}
	tag := name[strings.LastIndex(name, ":")+1:]
	if err := lp.AppendImage(img,
		layout.WithPlatform(v1.Platform{Architecture: "amd64", OS: "linux"}),
		layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          name,
			"org.opencontainers.image.ref.name": tag,
		})); err != nil {
		return v1.Hash{}, fmt.Errorf("append image to layout: %w", err)
	}
	if err := tarDir(dir, out); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}

// layerBytes renders the entries as an uncompressed, deterministic tar.
func layerBytes(entries []Entry) ([]byte, error) {
	type item struct {
		hdr  *tar.Header
		data []byte
	}
	items := map[string]item{}
	addDirs := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			name := strings.TrimPrefix(d, "/") + "/"
			if _, ok := items[name]; !ok {
				items[name] = item{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
			}
		}
	}
	for _, e := range entries {
		if !path.IsAbs(e.Path) {
			return nil, fmt.Errorf("image path %q must be absolute", e.Path)
		}
		p := path.Clean(e.Path)
		if p == "/" {
			return nil, errors.New("image path / is not an entry")
		}
		addDirs(p)
		name := strings.TrimPrefix(p, "/")
		switch {
		case e.Source != "":
			st, err := os.Stat(e.Source)
			if err != nil {
				return nil, fmt.Errorf("file for %s: %w", p, err)
			}
			if !st.Mode().IsRegular() {
				return nil, fmt.Errorf("file for %s: %s is not a regular file", p, e.Source)
			}
			data, err := os.ReadFile(e.Source)
			if err != nil {
				return nil, fmt.Errorf("file for %s: %w", p, err)
			}
			items[name] = item{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(st.Mode().Perm()), Size: int64(len(data))}, data: data}
		case e.Link != "":
			items[name] = item{hdr: &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: e.Link, Mode: 0o777}}
		default:
			items[name+"/"] = item{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755}}
		}
	}
	names := make([]string, 0, len(items))
	for n := range items {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		it := items[n]
		it.hdr.ModTime = time.Unix(0, 0)
		it.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(it.hdr); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", n, err)
		}
		if _, err := tw.Write(it.data); err != nil {
			return nil, fmt.Errorf("tar data %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

// tarDir writes the regular files under dir into the tar archive out
// (paths relative to dir, sorted, modification time 0).
func tarDir(dir, out string) (err error) {
	var files []string
	if err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("walk layout: %w", err)
	}
	sort.Strings(files)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("create archive: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	tw := tar.NewWriter(f)
	for _, p := range files {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return fmt.Errorf("relative path: %w", err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read layout file: %w", err)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("archive header %s: %w", rel, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("archive data %s: %w", rel, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("close archive: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close archive: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("rename archive: %w", err)
	}
	return nil
}
