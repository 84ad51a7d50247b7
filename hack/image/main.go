// Command image builds fanout's container image as an OCI image layout
// tarball, offline: static binaries in one layer on an empty base, run as
// 65532:65532 with /fanout as entrypoint. No registry and no daemon are
// involved, so CI can build and check a real image anywhere.
//
//	image build -o fanout.tar -tag ghcr.io/fanout-dev/fanout:dev bin/image/fanout bin/image/fanout-injector
//	image check fanout.tar
//
// The e2e harness builds its other images the same way (a pause image, the
// test client, static kube-controller-manager and kube-scheduler), with
// -user, -entrypoint and -dir set for each.
//
// check reads the tarball back: layout, manifest, config (user,
// entrypoint, platform), one layer holding exactly the binaries, each a
// static ELF executable, and runs every binary's --help.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
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

const (
	user       = "65532:65532"
	entrypoint = "/fanout"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		fs := flag.NewFlagSet("build", flag.ExitOnError)
		out := fs.String("o", "bin/fanout-image.tar", "output OCI layout tarball")
		tag := fs.String("tag", "ghcr.io/fanout-dev/fanout:dev", "image reference recorded in the index (org.opencontainers.image.ref.name)")
		arch := fs.String("arch", runtime.GOARCH, "architecture the binaries were built for")
		var o buildOptions
		fs.StringVar(&o.user, "user", user, "the image's user (uid:gid)")
		fs.StringVar(&o.entrypoint, "entrypoint", entrypoint, "the image's entrypoint (one path)")
		fs.StringVar(&o.dir, "dir", "/", "the directory the binaries go to; it is put first in PATH")
		fs.Parse(os.Args[2:])
		err = build(*out, *tag, *arch, o, fs.Args())
	case "check":
		fs := flag.NewFlagSet("check", flag.ExitOnError)
		want := fs.String("binaries", "fanout,fanout-injector", "comma-separated binaries the image must hold at /")
		fs.Parse(os.Args[2:])
		if fs.NArg() != 1 {
			usage()
		}
		err = check(fs.Arg(0), strings.Split(*want, ","))
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "image %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: image build [-o OUT.tar] [-tag REF] BINARY...\n       image check [-binaries a,b] OUT.tar")
	os.Exit(2)
}

// epoch is every timestamp in the image, so the same binaries give the
// same image digest.
var epoch = time.Unix(0, 0).UTC()

// buildOptions are the image config settings build can vary.
type buildOptions struct {
	user, entrypoint, dir string
}

func build(out, tag, arch string, o buildOptions, binaries []string) error {
	if len(binaries) == 0 {
		return errors.New("no binaries given")
	}
	if !path.IsAbs(o.dir) {
		return fmt.Errorf("-dir %q: want an absolute path", o.dir)
	}
	dir := strings.Trim(path.Clean(o.dir), "/")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if dir != "" {
		parts := strings.Split(dir, "/")
		for i := range parts {
			if err := tw.WriteHeader(&tar.Header{
				Name: strings.Join(parts[:i+1], "/") + "/", Mode: 0o755,
				Typeflag: tar.TypeDir, ModTime: epoch, Format: tar.FormatPAX,
			}); err != nil {
				return err
			}
		}
	}
	for _, b := range binaries {
		data, err := os.ReadFile(b)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{
			Name: path.Join(dir, filepath.Base(b)), Mode: 0o755, Size: int64(len(data)),
			Typeflag: tar.TypeReg, ModTime: epoch, Format: tar.FormatPAX,
		}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config.User = o.user
	cf.Config.Entrypoint = []string{o.entrypoint}
	// The binaries' directory first, / too: `kubectl exec POD -c fanout --
	// fanout status` finds fanout only through PATH, and a runtime's
	// default PATH does not hold /.
	cf.Config.Env = []string{"PATH=" + path.Join("/", dir) + ":/usr/local/bin:/usr/bin:/bin"}
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{"org.opencontainers.image.source": "https://github.com/fanout-dev/fanout"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}

	layoutDir, err := os.MkdirTemp("", "fanout-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(layoutDir)
	p, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return err
	}
	if err := tarDir(layoutDir, out); err != nil {
		return err
	}
	d, _ := img.Digest()
	fmt.Printf("wrote %s: %s %s (%d binaries)\n", out, tag, d, len(binaries))
	return nil
}

// tarDir writes the layout directory as a tarball (an "oci-archive").
func tarDir(dir, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	var paths []string
	if err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && p != dir {
			paths = append(paths, p)
		}
		return err
	}); err != nil {
		f.Close()
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			f.Close()
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Mode: 0o644, Format: tar.FormatPAX}
		if info.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				f.Close()
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			f.Close()
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			f.Close()
			return err
		}
		if _, err := tw.Write(data); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func check(archive string, want []string) error {
	dir, err := os.MkdirTemp("", "fanout-image-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := untar(archive, dir, nil); err != nil {
		return fmt.Errorf("reading %s: %w", archive, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return fmt.Errorf("%s is not an OCI image layout: %w", archive, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(im.Manifests) != 1 {
		return fmt.Errorf("index lists %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.MediaType != types.OCIManifestSchema1 || desc.Annotations["org.opencontainers.image.ref.name"] == "" {
		return fmt.Errorf("manifest descriptor %+v: want an OCI manifest with a ref.name", desc)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if cf.OS != "linux" || cf.Config.User != user || !slices.Equal(cf.Config.Entrypoint, []string{entrypoint}) {
		return fmt.Errorf("config: os %q user %q entrypoint %q; want linux, %s, [%s]", cf.OS, cf.Config.User, cf.Config.Entrypoint, user, entrypoint)
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	if len(layers) != 1 {
		return fmt.Errorf("%d layers, want 1 (binaries on an empty base)", len(layers))
	}
	// Digests are verified as the layer is read.
	rc, err := layers[0].Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	root := filepath.Join(dir, "rootfs")
	var names []string
	if err := untarReader(rc, root, &names); err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	sort.Strings(names)
	sortedWant := slices.Clone(want)
	sort.Strings(sortedWant)
	if !slices.Equal(names, sortedWant) {
		return fmt.Errorf("layer holds %v, want exactly %v", names, sortedWant)
	}
	for _, name := range want {
		if !onPath(root, cf.Config.Env, name) {
			return fmt.Errorf("/%s is not on the image's PATH (env %q): kubectl exec POD -c fanout -- %s would not find it", name, cf.Config.Env, name)
		}
		bin := filepath.Join(root, name)
		if err := staticExecutable(bin, cf.Architecture); err != nil {
			return fmt.Errorf("/%s: %w", name, err)
		}
		out, err := exec.Command(bin, "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage: "+name) {
			return fmt.Errorf("/%s --help: %v\n%s", name, err, out)
		}
	}
	d, _ := img.Digest()
	fmt.Printf("%s: ok: %s, user %s, entrypoint %v, binaries %v static and answering --help\n", archive, d, cf.Config.User, cf.Config.Entrypoint, want)
	return nil
}

// onPath reports whether a directory of the PATH in env holds name under
// root, as a runtime looks a command up.
func onPath(root string, env []string, name string) bool {
	for _, e := range env {
		p, ok := strings.CutPrefix(e, "PATH=")
		if !ok {
			continue
		}
		for _, d := range filepath.SplitList(p) {
			if fi, err := os.Stat(filepath.Join(root, d, name)); err == nil && fi.Mode().IsRegular() {
				return true
			}
		}
	}
	return false
}

// staticExecutable checks that path is an ELF executable for arch with no
// program interpreter, i.e. it runs on an empty base image.
func staticExecutable(p, arch string) error {
	f, err := elf.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if m, ok := machines[arch]; ok && f.Machine != m {
		return fmt.Errorf("machine %s, want %s", f.Machine, m)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (has an ELF interpreter): build with CGO_ENABLED=0")
		}
	}
	info, err := os.Stat(p)
	if err != nil {
		return err
	}
	if info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("mode %v is not executable", info.Mode())
	}
	return nil
}

func untar(archive, dir string, names *[]string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	return untarReader(f, dir, names)
}

// untarReader extracts regular files and directories into dir, refusing
// paths that leave it, and records regular files' names.
func untarReader(r io.Reader, dir string, names *[]string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(hdr.Name)
		if name == "." {
			continue
		}
		if strings.HasPrefix(name, "../") || name == ".." || path.IsAbs(name) {
			return fmt.Errorf("entry %q leaves the archive root", hdr.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode).Perm())
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if names != nil {
				*names = append(*names, name)
			}
		default:
			return fmt.Errorf("entry %q has type %c; the image holds regular files only", hdr.Name, hdr.Typeflag)
		}
	}
}
