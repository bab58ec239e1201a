package devstack

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// The pods' CA bundle holds the stack's CA (so that `crucible push` trusts
// the drop-box) after the system's roots, and the pods' user can read it.
func TestWriteCABundle(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	pem := []byte("-----BEGIN CERTIFICATE-----\nc3RhY2s=\n-----END CERTIFICATE-----\n")
	if err := os.WriteFile(ca, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	path, err := writeCABundle(dir, ca)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(got, pem) {
		t.Errorf("bundle does not end with the stack's CA: %q", got[max(0, len(got)-200):])
	}
	for _, f := range systemRoots {
		if roots, err := os.ReadFile(f); err == nil {
			if !bytes.HasPrefix(got, roots) {
				t.Errorf("bundle does not start with the system roots of %s", f)
			}
			break
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode %v (%v), want 0644: pods run as nobody", fi.Mode(), err)
	}

	if path, err := writeCABundle(dir, ""); err != nil || path != "" {
		t.Errorf("no CA: %q %v, want no bundle", path, err)
	}
	if _, err := writeCABundle(dir, filepath.Join(dir, "missing.crt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing CA: %v, want not exist", err)
	}
}
