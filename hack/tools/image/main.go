// Command image builds crucible's OCI image without Docker: one layer per
// platform holding the static binary, the build machine's CA bundle and a
// passwd/group naming the non-root user 65532, and nothing else (no shell,
// no package manager). It writes an OCI image layout whose index.json names
// one multi-platform image index, and the same layout as a tar archive
// (oci-archive, which skopeo, podman and crane push as it is).
//
//	go run . --binary linux/amd64=bin/crucible-linux-amd64 --binary linux/arm64=... \
//	  --version v1.2.3 --source https://... --revision abc123 \
//	  --layout bin/image/oci --archive bin/image/crucible-oci.tar
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed shape.
const (
	binaryPath = "/usr/local/bin/crucible"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	nonRootID  = 65532
	homeDir    = "/home/nonroot"
)

// binaries collects repeated --binary os/arch=path flags.
type binaries []platformBinary

type platformBinary struct {
	platform v1.Platform
	path     string
}

func (b *binaries) String() string { return fmt.Sprint(*b) }

func (b *binaries) Set(s string) error {
	plat, path, ok := strings.Cut(s, "=")
	osName, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || osName != "linux" || arch == "" || path == "" {
		return fmt.Errorf("%q: want linux/ARCH=PATH", s)
	}
	*b = append(*b, platformBinary{platform: v1.Platform{OS: osName, Architecture: arch}, path: path})
	return nil
}

type options struct {
	bins                      binaries
	caFile                    string
	version, source, revision string
	created                   time.Time
	layoutDir, archive        string
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var o options
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.Var(&o.bins, "binary", "linux/ARCH=PATH of a static crucible binary (repeatable, one per platform)")
	fs.StringVar(&o.caFile, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle copied into the image (the build machine's)")
	fs.StringVar(&o.version, "version", "", "org.opencontainers.image.version (required)")
	fs.StringVar(&o.source, "source", "", "org.opencontainers.image.source (required)")
	fs.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision (required)")
	epoch := fs.Int64("created", 0, "creation time, seconds since the epoch (SOURCE_DATE_EPOCH): fixed times make the image reproducible")
	fs.StringVar(&o.layoutDir, "layout", "", "OCI image layout directory to write (replaced; required)")
	fs.StringVar(&o.archive, "archive", "", "the layout as a tar archive (oci-archive) to write; empty for none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.created = time.Unix(*epoch, 0).UTC()
	var errs []error
	if len(o.bins) == 0 {
		errs = append(errs, errors.New("--binary: at least one"))
	}
	for name, v := range map[string]string{"--version": o.version, "--source": o.source, "--revision": o.revision, "--layout": o.layoutDir} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s: required", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return build(o)
}

// build assembles one image per binary, their index, and writes them.
func build(o options) error {
	ca, err := os.ReadFile(o.caFile)
	if err != nil {
		return fmt.Errorf("ca certificates: %w", err)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":    "crucible",
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.source":   o.source,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.created":  o.created.Format(time.RFC3339),
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	for _, b := range o.bins {
		img, err := platformImage(b, ca, labels, o.created)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", b.platform.OS, b.platform.Architecture, err)
		}
		plat := b.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	if err := os.RemoveAll(o.layoutDir); err != nil {
		return err
	}
	p, err := layout.Write(o.layoutDir, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.version})); err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	if o.archive != "" {
		if err := tarDir(o.layoutDir, o.archive, o.created); err != nil {
			return fmt.Errorf("write archive: %w", err)
		}
	}
	return nil
}

// platformImage is the image of one platform: a single layer and a config
// whose entrypoint is the binary, run as 65532 with no shell.
func platformImage(b platformBinary, ca []byte, labels map[string]string, created time.Time) (v1.Image, error) {
	bin, err := os.ReadFile(b.path)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	layerTar, err := rootfs(bin, ca, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: created}, CreatedBy: "hack/tools/image: crucible, CA certificates, passwd", Comment: "crucible " + labels["org.opencontainers.image.version"],
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = b.platform.OS, b.platform.Architecture, b.platform.Variant
	cfg.Created = v1.Time{Time: created}
	cfg.Config = v1.Config{
		Entrypoint: []string{binaryPath},
		User:       strconv.Itoa(nonRootID) + ":" + strconv.Itoa(nonRootID),
		WorkingDir: homeDir,
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + caPath, "HOME=" + homeDir},
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// rootfs is the layer's tar: directories, /etc/passwd and /etc/group naming
// root and nonroot (so tools resolve the user; no login shell exists), the CA
// bundle and the binary. Every time is created, every owner root except the
// non-root user's home and a sticky /tmp.
func rootfs(bin, ca []byte, created time.Time) ([]byte, error) {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:" + homeDir + ":/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\n"
	entries := []struct {
		name  string
		mode  int64
		uid   int
		data  []byte
		isDir bool
	}{
		{name: "etc/", mode: 0o755, isDir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/ssl/", mode: 0o755, isDir: true},
		{name: "etc/ssl/certs/", mode: 0o755, isDir: true},
		{name: strings.TrimPrefix(caPath, "/"), mode: 0o644, data: ca},
		{name: "home/", mode: 0o755, isDir: true},
		{name: strings.TrimPrefix(homeDir, "/") + "/", mode: 0o700, uid: nonRootID, isDir: true},
		{name: "tmp/", mode: 0o1777, isDir: true},
		{name: "usr/", mode: 0o755, isDir: true},
		{name: "usr/local/", mode: 0o755, isDir: true},
		{name: "usr/local/bin/", mode: 0o755, isDir: true},
		{name: strings.TrimPrefix(binaryPath, "/"), mode: 0o755, data: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: created, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if e.isDir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes dir's tree as a tar archive at dest, in lexical order with
// fixed times, so equal layouts give equal archives.
func tarDir(dir, dest string, created time.Time) error {
	tmp := dest + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: created, Format: tar.FormatPAX, Typeflag: tar.TypeReg}
		if d.IsDir() {
			h.Name, h.Mode, h.Typeflag = h.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(h)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h.Size = info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src) // blobs can be large: never whole in memory
		return err
	})
	if err = errors.Join(err, tw.Close()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}
