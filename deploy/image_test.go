package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// OCI image-spec shapes, read with the standard library only so the test
// does not trust the library that wrote the image.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Manifests []descriptor `json:"manifests"` // an index
	Config    descriptor   `json:"config"`    // an image manifest
	Layers    []descriptor `json:"layers"`
}

type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string
		Cmd        []string
		User       string
		Env        []string
		Labels     map[string]string
	} `json:"config"`
}

// layout reads blobs of an OCI image layout, checking each one's digest and size.
type layout struct {
	t   *testing.T
	dir string
}

func (l layout) blob(d descriptor) []byte {
	l.t.Helper()
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		l.t.Fatalf("digest %q is not sha256", d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(l.dir, "blobs", "sha256", hexDigest))
	if err != nil {
		l.t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != hexDigest || int64(len(data)) != d.Size {
		l.t.Fatalf("blob %s: content does not match its descriptor (size %d, want %d)", d.Digest, len(data), d.Size)
	}
	return data
}

func (l layout) json(d descriptor, v any) {
	l.t.Helper()
	if err := json.Unmarshal(l.blob(d), v); err != nil {
		l.t.Fatalf("%s: %v", d.Digest, err)
	}
}

const (
	testVersion  = "v0.0.0-imagetest"
	testSource   = "https://example.test/crucible"
	testRevision = "0123456789abcdef"
)

// make image builds an OCI layout and archive whose image for this machine's
// architecture has the configured entrypoint, user, labels and files, no
// shell, and a static binary that runs.
func TestMakeImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds crucible and the image (minutes); run without -short")
	}
	platform := "linux/" + runtime.GOARCH
	out := makeImage(t, platform)
	l := layout{t: t, dir: filepath.Join(out, "oci")}

	var top manifest
	data, err := os.ReadFile(filepath.Join(l.dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d manifests", err, len(top.Manifests))
	}
	if ref := top.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; ref != testVersion {
		t.Errorf("ref.name %q, want %q", ref, testVersion)
	}
	var index manifest
	l.json(top.Manifests[0], &index)
	if len(index.Manifests) != 1 || index.Manifests[0].Platform == nil ||
		index.Manifests[0].Platform.OS+"/"+index.Manifests[0].Platform.Architecture != platform {
		t.Fatalf("image index %+v, want one manifest for %s", index.Manifests, platform)
	}
	var img manifest
	l.json(index.Manifests[0], &img)
	var cfg imageConfig
	l.json(img.Config, &cfg)

	if cfg.OS+"/"+cfg.Architecture != platform {
		t.Errorf("config platform %s/%s", cfg.OS, cfg.Architecture)
	}
	if diff := cmp.Diff([]string{"/usr/local/bin/crucible"}, cfg.Config.Entrypoint); diff != "" || cfg.Config.Cmd != nil {
		t.Errorf("entrypoint %v cmd %v", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q", cfg.Config.User)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version": testVersion, "org.opencontainers.image.source": testSource,
		"org.opencontainers.image.revision": testRevision, "org.opencontainers.image.created": "2023-11-14T22:13:20Z",
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}

	files := unpackLayers(t, l, img.Layers)
	var names []string
	for name := range files {
		names = append(names, name)
		if base := path.Base(name); slices.Contains([]string{"sh", "bash", "ash", "dash", "busybox"}, base) {
			t.Errorf("image has a shell: %s", name)
		}
	}
	slices.Sort(names)
	want := []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/crucible"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	hostCA, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil || !bytes.Equal(files["etc/ssl/certs/ca-certificates.crt"].data, hostCA) {
		t.Errorf("CA bundle is not the build machine's (%v)", err)
	}
	if !strings.Contains(string(files["etc/passwd"].data), "nonroot:x:65532:65532:") {
		t.Errorf("passwd:\n%s", files["etc/passwd"].data)
	}
	bin := files["usr/local/bin/crucible"]
	if bin.mode&0o111 == 0 {
		t.Errorf("binary mode %o", bin.mode)
	}
	runStaticBinary(t, bin.data)
	checkArchive(t, out)

	// The same sources and SOURCE_DATE_EPOCH give the same image, byte for byte.
	again, err := os.ReadFile(filepath.Join(makeImage(t, platform), "oci", "index.json"))
	if err != nil || !bytes.Equal(again, data) {
		t.Errorf("a second build differs:\n%s\n%s (%v)", data, again, err)
	}
}

// makeImage runs make image for platform into a new directory.
func makeImage(t *testing.T, platform string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "make", "-C", "..", "image", "IMAGE_PLATFORMS="+platform, "IMAGE_DIR="+out,
		"VERSION="+testVersion, "IMAGE_SOURCE="+testSource, "IMAGE_REVISION="+testRevision, "SOURCE_DATE_EPOCH=1700000000")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, b)
	}
	return out
}

type file struct {
	data []byte
	mode int64
}

// unpackLayers returns the regular files of the layers (gzip tars) by path.
func unpackLayers(t *testing.T, l layout, layers []descriptor) map[string]file {
	t.Helper()
	files := map[string]file{}
	for _, d := range layers {
		if d.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("layer media type %q", d.MediaType)
		}
		zr, err := gzip.NewReader(bytes.NewReader(l.blob(d)))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			switch h.Typeflag {
			case tar.TypeDir:
			case tar.TypeReg:
				data, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				files[path.Clean(h.Name)] = file{data: data, mode: h.Mode}
			default:
				t.Errorf("%s: unexpected tar entry type %q (links, devices)", h.Name, h.Typeflag)
			}
		}
	}
	return files
}

// runStaticBinary checks that the binary needs no dynamic loader (no
// PT_INTERP, no DT_NEEDED) and that `crucible version` prints the version.
func runStaticBinary(t *testing.T, data []byte) {
	t.Helper()
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("binary is not ELF: %v", err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("binary has an ELF interpreter: not static")
		}
	}
	if libs, _ := ef.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v", libs)
	}
	bin := filepath.Join(t.TempDir(), "crucible")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "crucible "+testVersion+" ") {
		t.Errorf("crucible version: %q, %v", out, err)
	}
}

// checkArchive compares the oci-archive's entries with the layout's files.
func checkArchive(t *testing.T, out string) {
	t.Helper()
	f, err := os.Open(filepath.Join(out, "crucible-oci.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var inTar, inDir []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			inTar = append(inTar, h.Name)
		}
	}
	root := filepath.Join(out, "oci")
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			inDir = append(inDir, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(inTar)
	slices.Sort(inDir)
	if diff := cmp.Diff(inDir, inTar); diff != "" || !slices.Contains(inTar, "oci-layout") {
		t.Errorf("archive entries vs layout (-layout +archive):\n%s", diff)
	}
}
